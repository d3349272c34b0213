// The `formats:` section: every key read into the declared format the
// pipeline uses, and every mistake reported with its key and line.
#include <gtest/gtest.h>

#include <string>

#include "daemon/config.h"

namespace infertap::daemon {
namespace {

std::string parse_error(const std::string& text) {
  std::string error;
  const auto c = parse_config(text, &error);
  EXPECT_FALSE(c.has_value()) << "accepted:\n" << text;
  return error;
}

TEST(DeclaredFormatsConfig, EveryKeyReachesThePipeline) {
  std::string error;
  const auto c = parse_config(R"(formats:
  - name: acme
    path: "/acme/v1/*"
    content_type: Application/X-Acme-Events
    framing: sse
    content: /chunk/delta
    cumulative: true
    finish: /final
    finish_value: "true"
    finish_reason: /stop_reason
    tokens: /usage/output_tokens
    prompt_tokens: /usage/input_tokens
    error: /error/code
    model: /model
    response_id: /id
    provider: acme-cloud
    operation: chat
  - name: second
    content: /text
)",
                              &error);
  ASSERT_TRUE(c) << error;
  ASSERT_EQ(c->pipeline.formats.size(), 2u);
  const protocol::DeclaredFormat& f = *c->pipeline.formats[0];
  EXPECT_EQ(f.name, "acme");
  EXPECT_EQ(f.path, "/acme/v1/*");
  EXPECT_EQ(f.content_type, "application/x-acme-events") << "media types compare lower-case";
  EXPECT_EQ(f.framing, protocol::EventFraming::sse);
  EXPECT_EQ(f.content, "/chunk/delta");
  EXPECT_TRUE(f.cumulative);
  EXPECT_EQ(f.finish, "/final");
  EXPECT_EQ(f.finish_value, "true");
  EXPECT_EQ(f.finish_reason, "/stop_reason");
  EXPECT_EQ(f.tokens, "/usage/output_tokens");
  EXPECT_EQ(f.prompt_tokens, "/usage/input_tokens");
  EXPECT_EQ(f.error, "/error/code");
  EXPECT_EQ(f.model, "/model");
  EXPECT_EQ(f.response_id, "/id");
  EXPECT_EQ(f.provider, "acme-cloud");
  EXPECT_EQ(f.operation, "chat");
  const protocol::DeclaredFormat& g = *c->pipeline.formats[1];
  EXPECT_EQ(g.path, "*");
  EXPECT_FALSE(g.framing.has_value()) << "framing follows the media type when not given";
  EXPECT_FALSE(g.finish_value.has_value());
  EXPECT_TRUE(parse_config("formats: []\n", &error)->pipeline.formats.empty());
}

TEST(DeclaredFormatsConfig, MistakesNameTheKeyAndLine) {
  EXPECT_EQ(parse_error("formats:\n  name: acme\n"),
            "formats: must be a list of formats (- name: ..., path: ..., content: /pointer) (line 2)");
  EXPECT_EQ(parse_error("formats:\n  - name: acme\n    content: chunk.delta\n"),
            "formats[0].content: must be a JSON pointer starting with '/' (RFC 6901, e.g. \"/choices/0/text\"), got "
            "'chunk.delta' (line 3)");
  EXPECT_NE(parse_error("formats:\n  - name: acme\n    content: /a~2b\n")
                .find("formats[0].content: '~' must be followed by 0 or 1"),
            std::string::npos);
  EXPECT_NE(parse_error("formats:\n  - name: acme\n    content: /a\n    finsh: /b\n")
                .find("unknown key 'formats[0].finsh' (line 4); known keys in formats[0]: name, path, content_type"),
            std::string::npos);
  EXPECT_EQ(parse_error("formats:\n  - content: /a\n"), "formats[0]: needs a name (line 2)");
  EXPECT_EQ(parse_error("formats:\n  - name: acme\n"),
            "formats[0]: needs content: the JSON pointer of the generated text in each event (line 2)");
  EXPECT_EQ(parse_error("formats:\n  - {name: a, content: /x}\n  - {name: a, content: /y}\n"),
            "formats[1]: name 'a' given twice (line 3)");
  EXPECT_EQ(parse_error("formats:\n  - {name: a, content: /x, finish_value: done}\n"),
            "formats[0].finish_value: needs finish: the pointer it is read at (line 2)");
  EXPECT_EQ(parse_error("formats:\n  - {name: a, content: /x, framing: jsonl}\n"),
            "formats[0].framing: must be sse, ndjson or websocket, got 'jsonl' (line 2)");
  EXPECT_EQ(parse_error("formats:\n  - {name: a, content: /x, operation: embeddings}\n"),
            "formats[0].operation: must be chat, text_completion or generate_content, got 'embeddings' (line 2)");
  EXPECT_NE(parse_error("formats:\n  - {name: 'a b', content: /x}\n").find("formats[0].name: must be 1..64 letters"),
            std::string::npos);
  EXPECT_NE(parse_error("formats:\n  - {name: a, content: /x, path: acme}\n").find("formats[0].path: must be a glob"),
            std::string::npos);
  EXPECT_NE(parse_error("formats:\n  - {name: a, content: /x, content_type: 'text/plain; charset=utf-8'}\n")
                .find("formats[0].content_type: must be a media type without parameters"),
            std::string::npos);
  EXPECT_NE(parse_error("formats:\n  - {name: a, content: /x, cumulative: maybe}\n")
                .find("formats[0].cumulative: must be true or false"),
            std::string::npos);
}

}  // namespace
}  // namespace infertap::daemon
