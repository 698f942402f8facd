// JSON-schema constrained decoding: what the matcher accepts and refuses byte by byte, that every output a
// random walk through the grammar can produce parses and fits the schema, and that the vocabulary mask (one
// walk over a trie) equals checking each token on its own.
#include <random>

#include "engine/sampler/token_constraint.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using json = nlohmann::json;

std::shared_ptr<JsonGrammar> grammar_of(const json& schema) {
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->from_schema(schema));
    return g;
}

bool accepts(const json& schema, const std::string& text) {
    GrammarMatcher m(grammar_of(schema));
    return m.feed(text) && m.can_end();
}

const json kSchema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["x","y"]},"minItems":1,"maxItems":2},"ratio":{"type":["number","null"]},
    "child":{"$ref":"#/$defs/node"}},"required":["name","age"],"$defs":{"node":{"type":"object","properties":{"v":{"type":"boolean"}},
    "required":["v"],"additionalProperties":false}}})");

TEST(JsonGrammar, AcceptsWhatTheSchemaAllowsAndNothingElse) {
    EXPECT_TRUE(accepts(kSchema, R"({"name": "ab\"c", "age": -12})"));
    EXPECT_TRUE(accepts(kSchema, R"({"age":3,"name":"","tags":["x", "y"],"ratio":1.5e-3,"child":{"v":true}})"));
    EXPECT_TRUE(accepts(kSchema, R"({"name":"é\u00e9","age":0,"ratio":null})"));
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a"})"));                    // age required
    EXPECT_FALSE(accepts(kSchema, R"({"name":"abcdef","age":1})"));       // maxLength 5
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1.5})"));          // integer
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1,"tags":[]})"));  // minItems
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1,"tags":["x","y","x"]})"));
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1,"other":1})"));  // properties given: no other keys
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1,"age":2})"));    // no key twice
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":01})"));
    EXPECT_FALSE(accepts(kSchema, R"({"name":"a","age":1,"child":{"v":true,"w":1}})"));
    EXPECT_FALSE(accepts(kSchema, "{\"name\":\"a\nb\",\"age\":1}"));  // raw control character
    EXPECT_FALSE(accepts(kSchema, R"( {"name":"a","age":1})"));
    EXPECT_FALSE(accepts(kSchema, "{\"name\":\"\xc3\",\"age\":1}"));  // a UTF-8 character cut short
    EXPECT_FALSE(accepts(kSchema, "{\"name\":\"\xa9\",\"age\":1}"));  // a stray continuation byte
    EXPECT_FALSE(accepts(kSchema, R"({"name":"\udae9","age":1})"));   // a lone surrogate
    EXPECT_TRUE(accepts(kSchema, R"({"name":"\ud83d\ude00","age":1})"));
    EXPECT_TRUE(accepts(json::parse(R"({"type":"integer"})"), "-42"));                 // a number may end the output
    EXPECT_FALSE(accepts(json::parse(R"({"type":"integer"})"), "12345678901234567"));  // at most 16 digits
    EXPECT_TRUE(accepts(json::parse("{}"), R"([1, {"a": [null, "s"]}, true])"));
    EXPECT_TRUE(accepts(json::parse(R"({"type":"object"})"), R"({"any": {"x": [1]}})"));
    // Unsupported keywords are named, not ignored.
    for (const char* kw : {"pattern", "format", "minimum", "allOf", "uniqueItems"}) {
        json s = {{"type", "string"}, {kw, 1}};
        try {
            grammar_of(s);
            ADD_FAILURE() << kw;
        } catch (const GrammarError& e) { EXPECT_NE(std::string(e.what()).find(kw), std::string::npos) << e.what(); }
    }
    EXPECT_THROW(grammar_of(json::parse(R"({"$ref":"#/$defs/missing"})")), GrammarError);
    EXPECT_THROW(grammar_of(json::parse(R"({"type":"object","required":["x"]})")), GrammarError);
    // A keyword of the wrong JSON type is the schema's error, not an escaping type_error (found by the fuzzer).
    try {
        grammar_of(json::parse(R"({"type":"string","nullable":"yes"})"));
        ADD_FAILURE() << "nullable: \"yes\" accepted";
    } catch (const GrammarError& e) { EXPECT_NE(std::string(e.what()).find("nullable must be true or false"), std::string::npos) << e.what(); }
    EXPECT_TRUE(accepts(json::parse(R"({"type":"string","nullable":true})"), "null"));
    // A schema past the grammar's state bound is refused with the bound named; any value stays available after.
    json huge = {{"enum", json::array()}};
    for (size_t i = 0; i <= JsonGrammar::kMaxStates; ++i) huge["enum"].push_back(i);
    JsonGrammar g;
    try {
        g.from_schema(huge);
        ADD_FAILURE() << "an enum of " << huge["enum"].size() << " values accepted";
    } catch (const GrammarError& e) { EXPECT_NE(std::string(e.what()).find(std::to_string(JsonGrammar::kMaxStates)), std::string::npos) << e.what(); }
    EXPECT_GE(g.any_object(), 0);
}

// Random walks: at each step pick a random byte the grammar allows (or stop where it may end); whatever comes
// out must parse and match the schema's shape.
TEST(JsonGrammar, RandomWalksProduceValidJson) {
    const std::string alphabet = "{}[]\",: -.0123456789eE+abcdefghijklmnopqrstuvwxyz\\/u\xc3\xa9";
    auto g = grammar_of(kSchema);
    std::mt19937 rng(7);
    int finished = 0;
    for (int walk = 0; walk < 300; ++walk) {
        GrammarMatcher m(g);
        std::string out;
        for (int step = 0; step < 400; ++step) {
            if (m.can_end() && rng() % 4 == 0) break;
            std::vector<char> options;
            for (char c : alphabet) {
                GrammarMatcher probe = m;
                if (probe.feed(std::string(1, c))) options.push_back(c);
            }
            if (options.empty()) break;
            const char c = options[rng() % options.size()];
            ASSERT_TRUE(m.feed(std::string(1, c)));
            out += c;
        }
        if (!m.can_end()) continue;
        ++finished;
        const json j = json::parse(out, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << out;
        ASSERT_TRUE(j.is_object()) << out;
        EXPECT_TRUE(j.contains("name") && j["name"].is_string()) << out;
        EXPECT_TRUE(j.contains("age") && j["age"].is_number_integer()) << out;
        EXPECT_TRUE(!j.contains("tags") || (j["tags"].size() >= 1 && j["tags"].size() <= 2)) << out;
        EXPECT_TRUE(!j.contains("child") || j["child"]["v"].is_boolean()) << out;
    }
    EXPECT_GT(finished, 30);
}

TEST(JsonGrammar, VocabularyMaskEqualsCheckingEachToken) {
    // A vocabulary of single bytes, JSON fragments and multi-byte pieces (the mask walks a trie of them).
    std::vector<std::string> pieces = {"",   "{", "}",  "\"",       "\"name", "\":",  "\": \"", "age",  "\"age\": ", "1",
                                       "23", "-", ".",  "e",        "null",   "true", "[\"x\"", ",",    ", ",        " ",
                                       "\n", "a", "bc", "\xc3\xa9", "\xc3",   "\xa9", "\\\"",   "tags", "\":[\"",    "x\"]"};
    for (int c = 32; c < 127; ++c) pieces.push_back(std::string(1, static_cast<char>(c)));
    auto vocab = std::make_shared<VocabTrie>(pieces);
    // The second schema's free strings take the mask's shortcut (plain tokens all allowed, the rest walked).
    const auto free_text = json::parse(
        R"({"type":"object","properties":{"text":{"type":"string"},"more":{"type":"array","items":{"type":"string"}}}})");
    std::mt19937 rng(3);
    for (int walk = 0; walk < 80; ++walk) {
        TokenConstraint tc(grammar_of(walk % 2 ? kSchema : free_text), vocab);
        for (int step = 0; step < 60; ++step) {
            std::vector<uint8_t> mask;
            tc.mask(mask);
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < pieces.size(); ++id) {
                ASSERT_EQ(mask[id] != 0, tc.allows(static_cast<int32_t>(id), false)) << "token '" << pieces[id] << "' step " << step;
                if (mask[id]) allowed.push_back(static_cast<int32_t>(id));
            }
            if (allowed.empty()) break;
            tc.accept(allowed[rng() % allowed.size()]);
        }
    }
}

// Free text up to a closing tag (a tag-style call's string argument): any UTF-8 text, newlines and near misses of
// the tag included; it ends only at the whole tag; malformed UTF-8 and a tag that is not whole UTF-8 characters
// are refused.
TEST(JsonGrammar, TextRunsUntilItsTerminator) {
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->sequence({g->text_until("</p>"), g->literal("!")}));
    auto accepts_text = [&](const std::string& text) {
        GrammarMatcher m(g);
        return m.feed(text) && m.can_end();
    };
    EXPECT_TRUE(accepts_text("</p>!"));
    EXPECT_TRUE(accepts_text("a <b> </ </p </</p>!"));  // near misses, then the tag
    EXPECT_TRUE(accepts_text("line\n\tnext \xC3\xB8 \xE2\x82\xAC</p>!"));
    EXPECT_TRUE(accepts_text("<</p>!"));
    EXPECT_FALSE(accepts_text("x</p>x</p>!")) << "the first whole tag ends the text";
    GrammarMatcher open(g);
    EXPECT_TRUE(open.feed("unfinished </p"));
    EXPECT_FALSE(open.can_end());
    EXPECT_FALSE(GrammarMatcher(g).feed("\xC3(")) << "a lead byte without its continuation";
    EXPECT_FALSE(GrammarMatcher(g).feed("\x80")) << "a continuation byte alone";
    EXPECT_THROW(JsonGrammar().text_until(""), GrammarError);
    EXPECT_THROW(JsonGrammar().text_until("\xC3"), GrammarError);      // a lead byte without its continuation
    EXPECT_THROW(JsonGrammar().text_until("\xB8</p>"), GrammarError);  // a continuation byte first
}

// A tag with non-ASCII characters (DeepSeek-V4's </｜DSML｜parameter>): near misses that share its first bytes,
// or only the first bytes of its wide character, stay text; the text around it must still be whole UTF-8.
TEST(JsonGrammar, TextRunsUntilANonAsciiTerminator) {
    const std::string tag =
        "</\xEF\xBD\x9C"
        "DSML\xEF\xBD\x9C"
        "p>";  // </｜DSML｜p>
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->sequence({g->text_until(tag), g->literal("!")}));
    auto accepts_text = [&](const std::string& text) {
        GrammarMatcher m(g);
        return m.feed(text) && m.can_end();
    };
    EXPECT_TRUE(accepts_text(tag + "!"));
    EXPECT_TRUE(
        accepts_text("\xEF\xBD\x9C </\xEF\xBD\x9C"
                     "DSM </\xEF\xBD\x9B x " +
                     tag + "!"));  // the wide bar alone, a near miss, a neighbour
    EXPECT_TRUE(
        accepts_text("</</\xEF\xBD\x9C"
                     "DSML" +
                     tag + "!"));
    EXPECT_FALSE(accepts_text("x" + tag + "x" + tag + "!")) << "the first whole tag ends the text";
    EXPECT_FALSE(GrammarMatcher(g).feed("</\xEF\xBD(")) << "the tag's wide character cut by another byte";
    EXPECT_FALSE(GrammarMatcher(g).feed("\xEF\xBD" + tag)) << "a character cut short by the tag";
    GrammarMatcher open(g);
    EXPECT_TRUE(open.feed("a </\xEF\xBD"));
    EXPECT_FALSE(open.can_end());
}

}  // namespace
}  // namespace moe
