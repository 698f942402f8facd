// Constrained decoding for JSON: a JSON schema compiled to a small grammar (objects, arrays, strings, numbers,
// literals, sequences and alternatives; free text up to a closing tag), and a matcher that follows the output byte by byte and says which
// bytes may come next and whether the output may end. Used for response_format json_object / json_schema and
// for the arguments of a forced tool call (the call's fixed text around them as literals; a tag-style call's
// string arguments as text up to their closing tag).
//
// The generated JSON is compact apart from one optional space after ':' and ',' (what models write), numbers
// have at most 16 digits (exponents 2) and object keys no escapes, so every constrained output can finish. Keywords that
// would need more (pattern, format, minimum, ...) are refused with an error naming them, never ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

struct GrammarError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class JsonGrammar {
public:
    static constexpr size_t kMaxStates = size_t{1} << 17;
    enum class Kind : uint8_t { Literal, Sequence, Union, Object, Array, String, Number, Text };
    struct Node {
        Kind kind = Kind::Literal;
        std::string text{};                              // Literal; Text: its terminator
        std::vector<int> children{};                     // Sequence, Union; Object: property value nodes
        std::vector<std::string> names{};                // Object: property names (declared order)
        uint64_t required = 0;                           // Object: bit per property
        int additional = -1;                             // Object: node of other keys' values; -1: none allowed
        int items = -1;                                  // Array
        uint32_t min_count = 0, max_count = UINT32_MAX;  // Array items; String characters
        bool integer = false;                            // Number
    };

    int literal(std::string text);
    int sequence(std::vector<int> parts);
    int any_of(std::vector<int> alternatives);
    int any_value();   // any JSON value
    int any_object();  // any JSON object
    // Any UTF-8 text that does not contain `terminator`, then the terminator (a tag-style call's string argument).
    int text_until(std::string terminator);
    // Compiles a JSON schema (draft 2020-12 subset; local $ref to $defs/definitions). Throws GrammarError
    // naming the unsupported keyword and where it is.
    int from_schema(const nlohmann::json& schema);

    void set_root(int node) { root_ = node; }
    int root() const { return root_; }
    const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }

private:
    int add(Node n);
    int compile(const nlohmann::json& schema, const std::string& path);
    int compile_type(const std::string& type, const nlohmann::json& schema, const std::string& path);

    std::vector<Node> nodes_;
    bool building_any_value_ = false;
    int root_ = -1;
    int any_value_ = -1, any_object_ = -1;
    const nlohmann::json* schema_root_ = nullptr;
    std::vector<std::pair<std::string, int>> refs_;  // resolved $ref targets
};

// Where the output stands in the grammar: a set of parse stacks (alternatives still open).
class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<const JsonGrammar> grammar);
    // Consumes bytes; false (and the matcher unchanged) when the grammar does not allow them.
    bool feed(std::string_view bytes);
    // Whether the output may end here.
    bool can_end() const;
    // Every remaining alternative needs more output (for tests and the mask's early exit).
    bool done() const { return stacks_.empty(); }

    struct Frame {
        int node = 0;
        uint8_t phase = 0;
        uint32_t count = 0;      // Literal position, Sequence part, String characters, Array items, Number digits
        int32_t property = -1;   // Object: the property whose value is being read (-1: an additional one)
        uint64_t seen = 0;       // Object: properties given
        uint64_t key_match = 0;  // Object: properties the key typed so far still matches
        uint32_t key_pos = 0;    // Object: key bytes typed; Number: exponent digits; String: UTF-8 bytes owed
    };
    using Stack = std::vector<Frame>;

private:
    friend class TokenConstraint;
    bool feed_byte(uint8_t c, std::vector<Stack>& stacks) const;
    void normalize(Stack s, std::vector<Stack>& out) const;
    void advance(Stack s, uint8_t c, std::vector<Stack>& out) const;
    void consume(Stack s, uint8_t c, std::vector<Stack>& out) const;
    bool can_end_stack(Stack s) const;

    std::shared_ptr<const JsonGrammar> g_;
    std::vector<Stack> stacks_;
};

}  // namespace moe
