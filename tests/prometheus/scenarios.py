#!/usr/bin/env python3
"""The fleets the Prometheus rules are tested against, written as promtool
unit tests (tests/prometheus/*.test.yaml; run by tests/prometheus/run.sh).

    tests/prometheus/scenarios.py           writes the .test.yaml files
    tests/prometheus/scenarios.py --check   writes nothing; exits 1 naming each file that differs

Each scenario describes, minute by minute, what every node's agent would
export for its streams (the histograms' bucket counts, the objective counters,
the serving identity), and states which alerts fire and which stay silent at
several times, recovery included. Writing the series from a description keeps
the bucket arithmetic out of the test files: a stream "at 57 tokens/s" lands
in the (40, 75] bucket of every histogram the rules read, and counts as met
or missed against the objective exactly as the agent counts it.

Quantiles from buckets are interpolated: streams all in the bucket (lo, hi]
have a median of (lo + hi) / 2. The values below are chosen by bucket: a
"healthy" rate of 57 reads 57.5, a "slow" one of 15 reads 15.
Needs python3 and PyYAML (Debian: python3-yaml).
"""
import argparse
import os
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    print("scenarios: python3-yaml is missing (apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = "../../deploy/prometheus/infertap-rules.yaml"
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import gen_rules  # noqa: E402  (the rules' own source: their annotations)

ANNOTATIONS = {r["alert"]: r["annotations"] for r in gen_rules.alert_rules()}

RATE_LE = [5, 10, 20, 25, 30, 40, 75, 150]
LATENCY_LE = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

# The objective every scenario's agents are configured with (docs/configuration.md).
CHAT = {
    "ttft_seconds": 0.5, "min_tokens_per_second": 20, "target": 0.99, "objective_ratio": 1, "baseline_ratio": 1.5,
    "ttft_floor_seconds": 0.05, "rate_floor_tokens_per_second": 2, "min_streams": 20, "delivery_lag_seconds": 0.5,
    "lag_floor_seconds": 0.1, "max_path_degraded_share": 0.05,
}
ROUTE = "/v1/chat/completions"
NODES = ["node-a", "node-b", "node-c"]
ALERTS = ["InfertapTTFTAboveObjective", "InfertapTTFTAboveBaseline", "InfertapDecodeBelowObjective",
          "InfertapDecodeBelowBaseline", "InfertapNodeTTFTAboveFleet", "InfertapNodeDecodeBelowFleet",
          "InfertapDeliveryPathDegraded", "InfertapObjectiveBurnFast", "InfertapObjectiveBurnSlow",
          "InfertapServingIdentityNew"]


def labels_text(labels):
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def encode(values):
    """promtool's expanding notation for a per-minute list (None = no sample)."""
    out, i = [], 0
    while i < len(values):
        if values[i] is None:
            j = i
            while j < len(values) and values[j] is None:
                j += 1
            out.append(f"_x{j - i}")
            i = j
            continue
        j = i + 1
        step = values[j] - values[i] if j < len(values) and values[j] is not None else None
        while j + 1 < len(values) and values[j + 1] is not None and step is not None and \
                abs((values[j + 1] - values[j]) - step) < 1e-9:
            j += 1
        if step is None or j == i + 1 and j >= len(values):
            out.append(fmt(values[i]))
            i += 1
            continue
        n = j - i
        out.append(f"{fmt(values[i])}x{n}" if abs(step) < 1e-12 else f"{fmt(values[i])}+{fmt(step)}x{n}")
        i = j + 1
    return " ".join(out)


def fmt(v):
    return f"{v:g}" if abs(v - round(v)) > 1e-9 else str(int(round(v)))


class Fleet:
    """Per-minute increments of every series an agent exports, then the
    cumulative values promtool reads."""

    def __init__(self, minutes):
        self.minutes = minutes
        self.counters = {}  # (name, labels tuple) -> per-minute increments
        self.gauges = {}    # (name, labels tuple) -> per-minute values (None: absent)

    def _inc(self, name, labels, minute, n):
        key = (name, tuple(labels.items()))
        self.counters.setdefault(key, [0.0] * (self.minutes + 1))[minute] += n

    def _histogram(self, name, labels, bounds, minute, value, n):
        for le in bounds:
            self._inc(name + "_bucket", {**labels, "le": fmt(le)}, minute, n if value <= le else 0)
        self._inc(name + "_bucket", {**labels, "le": "+Inf"}, minute, n)
        self._inc(name + "_count", labels, minute, n)

    def streams(self, node, minutes, per_minute, rate, ttft, model="m1", vantage="server", objective=CHAT,
                objective_name="chat", response_model=None):
        """`per_minute` streams finish on `node` each minute of `minutes`, each
        at `rate` tokens/s after a first token `ttft` s after its request.
        `model` is the request's; the response names `response_model` (the
        same by default; "unknown": the agent's `model` is the request's)."""
        target = {"instance": f"{node}:9464", "job": "infertap", "node": node}
        infertap = {**target, "vantage": vantage, "model": model, "route": ROUTE, "process": "vllm"}
        gen_ai = {**target, "vantage": vantage, "gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai",
                  "gen_ai_request_model": model, "gen_ai_response_model": response_model or model, "server_port": "8000",
                  "route": ROUTE, "process": "vllm"}
        ttft_family = "gen_ai_server_time_to_first_token_seconds" if vantage == "server" else \
            "gen_ai_client_operation_time_to_first_chunk_seconds"
        met = "true" if ttft <= objective["ttft_seconds"] and rate >= objective["min_tokens_per_second"] else "false"
        for m in minutes:
            self._histogram("infertap_tokens_per_second", infertap, RATE_LE, m, rate, per_minute)
            self._histogram(ttft_family, gen_ai, LATENCY_LE, m, ttft, per_minute)
            for other in ("true", "false"):  # both series exist once the first stream is counted
                self._inc("infertap_objective_streams_total",
                          {**target, "objective": objective_name, "vantage": vantage, "model": model,
                           "route": ROUTE, "met": other}, m, per_minute if other == met else 0)

    def delivery(self, node, minutes, per_minute, lag, degraded_share, cause, model="m1", vantage="client"):
        """Server streams of `node` with a client-observed view: their delivery
        lag at the last token, and the share the path degraded with `cause`."""
        labels = {"instance": f"{node}:9464", "job": "infertap", "node": node, "vantage": vantage, "model": model,
                  "route": ROUTE, "process": "vllm"}
        for m in minutes:
            self._histogram("infertap_delivery_lag_seconds", labels, LATENCY_LE, m, lag, per_minute)
            self._inc("infertap_path_degraded_streams_total", {**labels, "cause": cause}, m,
                      per_minute * degraded_share)

    def objective(self, settings=CHAT, name="chat", order=0, node="node-a"):
        for setting, value in {**settings, "order": order}.items():
            key = ("infertap_objective", (("instance", f"{node}:9464"), ("job", "infertap"), ("node", node),
                                          ("objective", name), ("setting", setting)))
            self.gauges[key] = [value] * (self.minutes + 1)

    def identity(self, minutes, fingerprint, model="m1", node="node-a"):
        key = ("infertap_serving_identity", (("instance", f"{node}:9464"), ("job", "infertap"), ("node", node),
                                                 ("model", model), ("route", ROUTE), ("response_model", model),
                                                 ("system_fingerprint", fingerprint)))
        values = self.gauges.setdefault(key, [None] * (self.minutes + 1))
        for m in minutes:
            values[m] = 1

    def input_series(self):
        out = []
        for (name, labels), incs in self.counters.items():
            total, values = 0.0, []
            for n in incs:
                total += n
                values.append(total)
            out.append({"series": name + labels_text(dict(labels)), "values": encode(values)})
        for (name, labels), values in self.gauges.items():
            out.append({"series": name + labels_text(dict(labels)), "values": encode(values)})
        return out


def H(h, m=0):
    return h * 60 + m


def duration(minutes):
    h, m = divmod(minutes, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m or not h else "")


def alerts_at(minute, firing, names=ALERTS):
    """alert_rule_test entries at `minute`: `firing` maps alert names to the
    label sets expected; every other alert of `names` is expected silent."""
    tests = []
    for name in names:
        exp = [{"exp_labels": labels, "exp_annotations": annotations(name, labels)} for labels in firing.get(name, [])]
        tests.append({"eval_time": duration(minute), "alertname": name, "exp_alerts": exp})
    return tests


def annotations(alert, labels):
    """The alert's annotations as Prometheus expands them for these labels."""
    out = {}
    for key, template in ANNOTATIONS[alert].items():
        text = template
        for label, value in labels.items():
            text = text.replace("{{ $labels.%s }}" % label, value)
        assert "{{" not in text, f"{alert}: unexpanded template in {text!r}"
        out[key] = text
    return out


def sample(name, labels, value):
    return {"labels": name + labels_text(labels), "value": value}


def cohort(vantage="server", model="m1", severity="warning", **extra):
    return {"severity": severity, "model": model, "route": ROUTE, "vantage": vantage, "objective": "chat", **extra}


def node_labels(node, **kw):
    return cohort(instance=f"{node}:9464", node=node, **kw)


# ---- the scenarios ----------------------------------------------------------------

HEALTHY, SLOW, TTFT_OK, TTFT_SLOW = 57, 15, 0.2, 2
# promtool evaluates every rule at every step, data or not (about 25 ms a step
# for these rules): the scenarios that need a day of history are evaluated
# every 15 minutes, which their questions (baselines, identities) allow; the
# ALERTS-based hysteresis, which needs steps within the 5-minute lookback, is
# tested at 1 minute (flapping_cohort).
DAY_EVAL = "15m"
SERVER = {"model": "m1", "route": ROUTE, "vantage": "server"}


def healthy_fleet():
    """Three nodes serve one model at 57 tokens/s and 0.2 s TTFT, 20 streams a
    minute each (and node-a a second model whose responses name none):
    nothing fires, and the recorded fleet numbers are the sums and quantiles
    across nodes."""
    f = Fleet(H(1, 30))
    f.objective()
    for node in NODES:
        f.streams(node, range(1, f.minutes + 1), 20, HEALTHY, TTFT_OK)
    # A server whose responses name no model: TTFT's `model` is the request's.
    f.streams("node-a", range(1, f.minutes + 1), 20, HEALTHY, TTFT_OK, model="m2", response_model="unknown")
    checks = alerts_at(H(0, 30), {}) + alerts_at(H(1, 30), {})
    def recorded(name, value, labels=SERVER, eval_time="1h"):
        return {"expr": name, "eval_time": eval_time, "exp_samples": [sample(name, labels, value)]}

    exprs = [
        recorded("cohort:infertap_tokens_per_second:p50_5m", 57.5) | {
            "expr": 'cohort:infertap_tokens_per_second:p50_5m{model="m1"}'},
        recorded("cohort:infertap_ttft_seconds:p50_5m", 0.175) | {"expr": 'cohort:infertap_ttft_seconds:p50_5m{model="m1"}'},
        recorded("cohort:infertap_ttft_seconds_count:increase5m", 100, {**SERVER, "model": "m2"}) | {
            "expr": 'cohort:infertap_ttft_seconds_count:increase5m{model="m2"}'},
        recorded("cohort:infertap_tokens_per_second_count:increase5m", 300) | {  # 3 nodes x 20 a minute x 5
            "expr": 'cohort:infertap_tokens_per_second_count:increase5m{model="m1"}'},
        recorded("node_cohort:infertap_tokens_per_second_count:increase5m", 100,
                 {**SERVER, "instance": "node-b:9464", "node": "node-b"}) | {
                     "expr": 'node_cohort:infertap_tokens_per_second_count:increase5m{node="node-b"}'},
        recorded("objective:infertap_objective_streams_unmet:ratio_rate1h", 0, {"objective": "chat", "vantage": "server"}),
        recorded("cohort:infertap_objective:primary", 0, {**SERVER, "objective": "chat"}) | {
            "expr": 'cohort:infertap_objective:primary{model="m1"}'},
        {"expr": 'cohort:infertap_objective:setting{setting="min_tokens_per_second", model="m1"}', "eval_time": "1h",
         "exp_samples": [sample("cohort:infertap_objective:setting",
                                {**SERVER, "objective": "chat", "setting": "min_tokens_per_second"}, 20)]},
    ]
    return "2m", [{"name": "healthy fleet", "fleet": f, "alerts": checks, "exprs": exprs}]


def one_slow_node():
    """node-c streams at 25 tokens/s, the others at 57: still within the
    objective (20), so no cohort alert; the fleet's median stays 48.75, and the
    node is materially slower than its cohort (25 < 48.75 / 1.5) — the node
    alert names it, and only it. node-c recovers at 1h10m."""
    f = Fleet(H(1, 40))
    f.objective()
    for node in NODES:
        slow = node == "node-c"
        f.streams(node, range(1, H(0, 20)), 20, HEALTHY, TTFT_OK)
        f.streams(node, range(H(0, 20), H(1, 10)), 20, 25 if slow else HEALTHY, TTFT_OK)
        f.streams(node, range(H(1, 10), f.minutes + 1), 20, HEALTHY, TTFT_OK)
    slow = {"InfertapNodeDecodeBelowFleet": [node_labels("node-c")]}
    checks = (alerts_at(H(0, 30), {})  # pending: persistence not yet met
              + alerts_at(H(0, 45), slow) + alerts_at(H(1, 5), slow)
              + alerts_at(H(1, 20), {}))  # recovered
    return "1m", [{"name": "one slow node", "fleet": f, "alerts": checks, "exprs": []}]


def fleet_wide_slowdown():
    """A day at 57 tokens/s, then every node drops to 15 tokens/s at 25h15m:
    the cohort breaches the objective (15 < 18: ratio 1, floor 2) and its own
    median of the day before (15 < 57.5 / 1.5); every stream misses the
    objective, so both burn-rate alerts fire; no node differs from the fleet,
    and TTFT stays healthy. The serving identity, the same since the start,
    has a day of history by then and does not hold the baseline back.
    Recovery at 26h15m resolves every alert. (Two nodes, rules evaluated every
    15 minutes: see DAY_EVAL.)"""
    f = Fleet(H(26, 45))
    f.objective()
    f.identity(range(0, f.minutes + 1), "fp_a")
    for node in NODES[:2]:
        f.streams(node, range(1, H(25, 15)), 20, HEALTHY, TTFT_OK)
        f.streams(node, range(H(25, 15), H(26, 15)), 20, SLOW, TTFT_OK)
        f.streams(node, range(H(26, 15), f.minutes + 1), 20, HEALTHY, TTFT_OK)
    burn = [{"severity": "critical", "objective": "chat", "vantage": "server"}]
    slow_burn = [{"severity": "warning", "objective": "chat", "vantage": "server"}]
    decode = {"InfertapObjectiveBurnFast": burn, "InfertapDecodeBelowObjective": [cohort()],
              "InfertapDecodeBelowBaseline": [cohort()]}
    checks = (alerts_at(H(25, 15), {})
              + alerts_at(H(25, 30), {})  # breaching, not yet for long enough
              + alerts_at(H(25, 45), decode)
              + alerts_at(H(26, 0), {**decode, "InfertapObjectiveBurnSlow": slow_burn})
              + alerts_at(H(26, 45), {}))
    # Seed 003's day over day, before the slowdown: a day like the one before.
    daily = [{"expr": name, "eval_time": "25h15m", "exp_samples": [sample(name, SERVER, value)]}
             for name, value in (("cohort:infertap_tokens_per_second:p50_1d", 57.5),
                                 ("cohort:infertap_tokens_per_second:p50_1d_dod", 1),
                                 ("cohort:infertap_ttft_seconds:p50_1d", 0.175),
                                 ("cohort:infertap_ttft_seconds:p50_1d_dod", 1))]
    return DAY_EVAL, [{"name": "fleet-wide slowdown", "fleet": f, "alerts": checks, "exprs": daily}]


def model_upgrade():
    """fp_a serves at 57 tokens/s; at 2h fp_b replaces it at 35 tokens/s:
    within the objective, but a day later (25h..27h) materially below the
    cohort's median of the day before (35 < 57.5 / 1.5), which is fp_a's. fp_b
    is new (it was not serving 25 h before): "review the baseline" fires, and
    the baseline alert does not compare it with fp_a's day. From 27h (25 h
    after the upgrade) fp_b's own day is the baseline: 35 against 35 is
    silent. At 27h30m fp_b slows to 21 (a median of 22.5: still within the
    objective, but below 35 / 1.5), and the baseline alert fires against fp_b's
    own history. (Two nodes, rules evaluated every 15 minutes: see DAY_EVAL.)"""
    f = Fleet(H(28, 15))
    f.objective()
    f.identity(range(0, H(3, 0)), "fp_a")  # kept an hour after its last stream
    f.identity(range(H(2, 0), f.minutes + 1), "fp_b")
    for node in NODES[:2]:
        f.streams(node, range(1, H(2, 0)), 20, HEALTHY, TTFT_OK)
        f.streams(node, range(H(2, 0), H(27, 30)), 20, 35, TTFT_OK)
        f.streams(node, range(H(27, 30), f.minutes + 1), 20, 21, TTFT_OK)
    new = [{"severity": "info", "model": "m1", "route": ROUTE, "response_model": "m1", "system_fingerprint": "fp_b"}]
    fp_a = {**new[0], "system_fingerprint": "fp_a"}
    checks = (alerts_at(H(1, 0), {"InfertapServingIdentityNew": [fp_a]})  # the first day: everything is new
              + alerts_at(H(2, 30), {"InfertapServingIdentityNew": [fp_a] + new})
              + alerts_at(H(25, 30), {"InfertapServingIdentityNew": new})
              + alerts_at(H(26, 30), {"InfertapServingIdentityNew": new})
              + alerts_at(H(27, 15), {})
              + alerts_at(H(28, 15), {"InfertapDecodeBelowBaseline": [cohort()]}))
    return DAY_EVAL, [{"name": "model upgrade", "fleet": f, "alerts": checks, "exprs": [
        # What fp_b would have been compared with at 25h30m: fp_a's hour.
        {"expr": "cohort:infertap_tokens_per_second:p50_1h offset 1d", "eval_time": "25h30m",
         "exp_samples": [sample("cohort:infertap_tokens_per_second:p50_1h", SERVER, 57.5)]},
        {"expr": "cohort:infertap_tokens_per_second:p50_5m", "eval_time": "25h30m",
         "exp_samples": [sample("cohort:infertap_tokens_per_second:p50_5m", SERVER, 35)]},
    ]}]


def flapping_cohort():
    """The decode rate breaches the objective (15 < 18) at 10m and fires at
    25m (5 m for the window, 10 m of persistence); from 40m it hovers between
    the enter threshold (18) and the objective (20) — 60 % of streams at 15,
    40 % at 25, a median of 18.33 — alternating with breaches every 6 minutes:
    it keeps firing instead of resolving and re-firing. Back at 57 from 1h10m,
    it resolves. A dip of 6 minutes later (1h30m) does not persist long enough
    to fire."""
    f = Fleet(H(2, 0))
    f.objective()
    for node in NODES:
        f.streams(node, range(1, H(0, 10)), 20, HEALTHY, TTFT_OK)
        f.streams(node, range(H(0, 10), H(0, 40)), 20, SLOW, TTFT_OK)
        for start in range(H(0, 40), H(1, 10), 12):
            f.streams(node, range(start, start + 6), 12, SLOW, TTFT_OK)  # hovering: 60 % slow ...
            f.streams(node, range(start, start + 6), 8, 25, TTFT_OK)     # ... 40 % at 25
            f.streams(node, range(start + 6, min(start + 12, H(1, 10))), 20, SLOW, TTFT_OK)
        f.streams(node, range(H(1, 10), H(1, 30)), 20, HEALTHY, TTFT_OK)
        f.streams(node, range(H(1, 30), H(1, 36)), 20, SLOW, TTFT_OK)
        f.streams(node, range(H(1, 36), f.minutes + 1), 20, HEALTHY, TTFT_OK)
    # The burn-rate alerts see the same streams miss and fire too (burn_rate
    # tests them); here: the cohort's decode alert, and that nothing else
    # judges a cohort or a node.
    names = [n for n in ALERTS if "Burn" not in n]
    decode = {"InfertapDecodeBelowObjective": [cohort()]}
    checks = alerts_at(H(0, 20), {}, names)
    for minute in (H(0, 25), H(0, 45), H(0, 50), H(0, 55), H(1, 0), H(1, 5), H(1, 8)):
        checks += alerts_at(minute, decode, names)
    for minute in (H(1, 20), H(1, 35), H(1, 40), H(1, 55)):
        checks += alerts_at(minute, {}, names)
    return "1m", [{"name": "flapping cohort", "fleet": f, "alerts": checks, "exprs": []}]


def too_little_traffic():
    """m-rare: one stream every 5 minutes at 5 tokens/s and 3 s TTFT: every
    stream misses the objective and its medians are far off, but no window has
    the 20 streams the objective asks for (5 m: 1, 30 m: 6), so nothing
    fires. The control: the same streams, 10 a minute on each node, fire the
    TTFT, decode and burn-rate alerts."""
    rare = Fleet(H(1, 30))
    rare.objective()
    rare.streams("node-a", range(5, rare.minutes + 1, 5), 1, 5, 3, model="m-rare")
    busy = Fleet(H(1, 30))
    busy.objective()
    for node in NODES:
        busy.streams(node, range(1, busy.minutes + 1), 10, 5, 3, model="m-busy")
    burn = {"severity": "critical", "objective": "chat", "vantage": "server"}
    firing = {"InfertapTTFTAboveObjective": [cohort(model="m-busy")],
              "InfertapDecodeBelowObjective": [cohort(model="m-busy")],
              "InfertapObjectiveBurnFast": [burn], "InfertapObjectiveBurnSlow": [{**burn, "severity": "warning"}]}
    rare_p50 = {"expr": "cohort:infertap_tokens_per_second:p50_5m", "eval_time": "1h30m",
                "exp_samples": [sample("cohort:infertap_tokens_per_second:p50_5m", {**SERVER, "model": "m-rare"}, 2.5)]}
    return "2m", [
        {"name": "too little traffic", "fleet": rare,
         "alerts": alerts_at(H(0, 30), {}) + alerts_at(H(1, 0), {}) + alerts_at(H(1, 30), {}), "exprs": [rare_p50]},
        {"name": "the same streams with enough traffic", "fleet": busy, "alerts": alerts_at(H(1, 30), firing),
         "exprs": []},
    ]


def clients_stalled():
    """The server streams healthily (57 tokens/s, 0.2 s TTFT) while, from 10m,
    its remote clients fall behind: the last token reaches them 2 s after the
    server sent it (the ACKs say so: vantage acked) and the path degrades 40 %
    of the streams (backpressure). The delivery alert fires for that vantage
    from 20m and resolves once the clients keep up again (50m); nothing else
    fires. In the second fleet the server is slow to its first token as well:
    that is the server's TTFT alert, and the delivery alert stays silent."""
    groups = []
    for name, server_ttft in (("a healthy server", TTFT_OK), ("a slow server", TTFT_SLOW)):
        f = Fleet(H(1, 0))
        f.objective()
        for node in NODES:
            f.streams(node, range(1, f.minutes + 1), 20, HEALTHY, server_ttft)
            f.delivery(node, range(1, H(0, 10)), 20, 0.03, 0, "backpressure", vantage="acked")
            f.delivery(node, range(H(0, 10), H(0, 50)), 20, 2, 0.4, "backpressure", vantage="acked")
            f.delivery(node, range(H(0, 50), f.minutes + 1), 20, 0.03, 0, "backpressure", vantage="acked")
        if server_ttft == TTFT_OK:
            delivery = {"InfertapDeliveryPathDegraded": [cohort(vantage="acked")]}
            checks = (alerts_at(H(0, 15), {}) + alerts_at(H(0, 25), delivery) + alerts_at(H(0, 45), delivery)
                      + alerts_at(H(1, 0), {}))
        else:
            burn = {"severity": "critical", "objective": "chat", "vantage": "server"}
            checks = alerts_at(H(0, 40), {"InfertapTTFTAboveObjective": [cohort()],
                                           "InfertapObjectiveBurnFast": [burn],
                                           "InfertapObjectiveBurnSlow": [{**burn, "severity": "warning"}]})
        groups.append({"name": f"clients stalled behind {name}", "fleet": f, "alerts": checks, "exprs": []})
    return "2m", groups


def burn_rate():
    """Streams whose median is healthy but whose tail misses the objective: a
    fifth of them at 15 tokens/s burns a 1 % budget 20x (fast: > 14.4x over 5m
    and 1h; slow: > 6x over 30m and 6h). 3 % missing burns 3x: neither fires.
    A 10-minute blip of 20 % in an hour of 1 % does not page: the 1-hour
    window stays under 14.4x."""
    groups = []
    for name, minutes, mix in (
            ("a fifth of streams miss", H(1, 0), lambda m: 0.2),
            ("3 % of streams miss", H(1, 0), lambda m: 0.03),
            ("a 10-minute blip", H(1, 10), lambda m: 0.2 if H(0, 55) <= m < H(1, 5) else 0.01)):
        f = Fleet(minutes)
        f.objective()
        for node in NODES:
            for m in range(1, minutes + 1):
                share = mix(m)
                f.streams(node, [m], 100 * (1 - share), HEALTHY, TTFT_OK)
                f.streams(node, [m], 100 * share, SLOW, TTFT_OK)
        fast = {"severity": "critical", "objective": "chat", "vantage": "server"}
        if name.startswith("a fifth"):
            checks = (alerts_at(H(0, 10), {"InfertapObjectiveBurnFast": [fast]})
                      + alerts_at(H(0, 40), {"InfertapObjectiveBurnFast": [fast],
                                             "InfertapObjectiveBurnSlow": [{**fast, "severity": "warning"}]}))
        elif name.startswith("3 %"):
            checks = alerts_at(H(0, 30), {}) + alerts_at(H(1, 0), {})
        else:
            checks = alerts_at(H(1, 5), {}) + alerts_at(H(1, 10), {})
        groups.append({"name": f"burn rate: {name}", "fleet": f, "alerts": checks, "exprs": []})
    return "2m", groups


SCENARIOS = {
    "healthy_fleet": healthy_fleet,
    "one_slow_node": one_slow_node,
    "fleet_wide_slowdown": fleet_wide_slowdown,
    "model_upgrade": model_upgrade,
    "flapping_cohort": flapping_cohort,
    "too_little_traffic": too_little_traffic,
    "clients_stalled": clients_stalled,
    "burn_rate": burn_rate,
}


class Dumper(yaml.SafeDumper):
    pass


def render(name, make):
    interval, groups = make()
    # Each group reads what the groups before it recorded at the same step
    # (promtool's default order is by name, which would give the alerts the
    # previous step's records: stale at DAY_EVAL).
    order = [g["name"] for g in gen_rules.groups()]
    doc = {"rule_files": [RULES], "evaluation_interval": interval, "group_eval_order": order, "tests": []}
    for g in groups:
        test = {"name": g["name"], "interval": "1m", "input_series": g["fleet"].input_series()}
        if g["alerts"]:
            test["alert_rule_test"] = g["alerts"]
        if g["exprs"]:
            test["promql_expr_test"] = g["exprs"]
        doc["tests"].append(test)
    header = "# Generated by tests/prometheus/scenarios.py; do not edit.\n# " + \
        "\n# ".join(line.strip() for line in (make.__doc__ or "").strip().splitlines()) + "\n"
    return header + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=1000, default_flow_style=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    files = {os.path.join(HERE, f"{name}.test.yaml"): render(name, make) for name, make in SCENARIOS.items()}
    return gen_rules.write_or_check(files, ap.parse_args().check, "tests/prometheus/scenarios.py")


if __name__ == "__main__":
    sys.exit(main())
