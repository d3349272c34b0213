// Which events of one record are which events of another: the two ends of
// one TCP connection by TCP sequence (body offsets as fallback), a gateway's
// two legs by content (a hash of each event's data), whatever the gateway.
#pragma once

#include <vector>

#include "core/types.h"

namespace infertap::core {

// For each event of `from`, its event in `to` (the other end of the same TCP
// connection), -1 when none.
std::vector<int> match_tcp_ends(const StreamRecord& from, const StreamRecord& to);

// The same SSE events on a gateway's two legs, in order, by data hash: for
// each upstream event, the downstream one (exact matches only, -1 otherwise).
std::vector<int> match_by_content(const StreamRecord& up, const StreamRecord& down);

int count_matched(const std::vector<int>& map);

}  // namespace infertap::core
