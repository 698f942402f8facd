#include "engine/sampler/json_grammar.h"

#include <algorithm>

namespace moe {

using json = nlohmann::json;

namespace {
constexpr uint32_t kMaxNumberDigits = 16;
constexpr size_t kMaxStacks = 256;  // alternatives followed at once; more are dropped (pathological schemas)
constexpr size_t kMaxProperties = 64;

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
}  // namespace

// ---- grammar construction ----

int JsonGrammar::add(Node n) {
    // Bounds what one request's schemas can allocate (the API bounds each schema's bytes, not their sum); any
    // value's seven nodes, the fallback where a tool's schema is refused, are always allowed.
    if (nodes_.size() >= kMaxStates && !building_any_value_)
        throw GrammarError("the schemas need more than " + std::to_string(kMaxStates) + " grammar states");
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
}

int JsonGrammar::literal(std::string text) { return add({.kind = Kind::Literal, .text = std::move(text)}); }
int JsonGrammar::sequence(std::vector<int> parts) { return add({.kind = Kind::Sequence, .children = std::move(parts)}); }
int JsonGrammar::any_of(std::vector<int> alternatives) { return add({.kind = Kind::Union, .children = std::move(alternatives)}); }
int JsonGrammar::text_until(std::string terminator) {
    if (terminator.empty()) throw GrammarError("free text needs a terminator");
    // Whole UTF-8 characters (the matcher checks the text's UTF-8 across the terminator's bytes too).
    for (size_t i = 0; i < terminator.size();) {
        const auto c = static_cast<uint8_t>(terminator[i]);
        const size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool whole = len > 0 && i + len <= terminator.size();
        for (size_t k = 1; whole && k < len; ++k) whole = (static_cast<uint8_t>(terminator[i + k]) & 0xC0) == 0x80;
        if (!whole) throw GrammarError("free text's terminator '" + terminator + "' is not valid UTF-8");
        i += len;
    }
    return add({.kind = Kind::Text, .text = std::move(terminator)});
}

int JsonGrammar::any_value() {
    if (any_value_ >= 0) return any_value_;
    building_any_value_ = true;
    any_value_ = add({.kind = Kind::Union});  // filled below: it refers to itself through objects and arrays
    const int object = add({.kind = Kind::Object, .additional = any_value_});
    const int array = add({.kind = Kind::Array, .items = any_value_});
    const int str = add({.kind = Kind::String});
    const int num = add({.kind = Kind::Number});
    nodes_[static_cast<size_t>(any_value_)].children = {object, array, str, num, literal("true"), literal("false"), literal("null")};
    any_object_ = object;
    building_any_value_ = false;
    return any_value_;
}

int JsonGrammar::any_object() {
    any_value();
    return any_object_;
}

int JsonGrammar::from_schema(const json& schema) {
    schema_root_ = &schema;
    refs_.clear();
    return compile(schema, "schema");
}

int JsonGrammar::compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
        if (!s.get<bool>()) throw GrammarError(path + ": the schema 'false' admits no value");
        return any_value();
    }
    if (!s.is_object()) throw GrammarError(path + " must be a schema object");
    static const char* const kAnnotations[] = {"description", "title",    "default",   "examples", "$schema",     "$id",   "$comment",
                                               "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions", "strict"};
    static const char* const kUsed[] = {"type",      "properties", "required", "additionalProperties",
                                        "items",     "enum",       "const",    "anyOf",
                                        "oneOf",     "minItems",   "maxItems", "minLength",
                                        "maxLength", "$ref",       "nullable"};
    for (const auto& item : s.items()) {
        const std::string& key = item.key();  // a plain name: clang 14 (the fuzz build) cannot capture bindings
        const bool known = std::find_if(std::begin(kAnnotations), std::end(kAnnotations), [&](const char* k) { return key == k; }) !=
                               std::end(kAnnotations) ||
                           std::find_if(std::begin(kUsed), std::end(kUsed), [&](const char* k) { return key == k; }) != std::end(kUsed);
        if (!known) throw GrammarError(path + ": the schema keyword '" + key + "' is not supported for constrained output");
    }
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
        for (const auto& [name, node] : refs_)
            if (name == ref) return node;
        const json* target = nullptr;
        for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
            const std::string p = prefix;
            const std::string section = p.substr(2, p.size() - 3);
            if (ref.rfind(p, 0) == 0 && schema_root_->contains(section) && (*schema_root_)[section].contains(ref.substr(p.size())))
                target = &(*schema_root_)[section][ref.substr(p.size())];
        }
        if (ref == "#") target = schema_root_;
        if (!target) throw GrammarError(path + ": $ref '" + ref + "' is not a local #/$defs/ or #/definitions/ reference");
        // A placeholder union first, so recursive references resolve to it.
        const int placeholder = add({.kind = Kind::Union});
        refs_.emplace_back(ref, placeholder);
        const int body = compile(*target, path + "." + ref);
        nodes_[static_cast<size_t>(placeholder)].children = {body};
        return placeholder;
    }
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) throw GrammarError(path + ".enum must be a non-empty array");
        std::vector<int> alts;
        for (const auto& v : s["enum"]) alts.push_back(literal(v.dump()));
        return any_of(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"})
        if (s.contains(key)) {
            if (!s[key].is_array() || s[key].empty()) throw GrammarError(path + "." + key + " must be a non-empty array");
            std::vector<int> alts;
            for (size_t i = 0; i < s[key].size(); ++i) alts.push_back(compile(s[key][i], path + "." + key + "[" + std::to_string(i) + "]"));
            return any_of(std::move(alts));
        }
    std::vector<std::string> types;
    if (s.contains("type")) {
        if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
        else if (s["type"].is_array())
            for (const auto& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "?");
        else throw GrammarError(path + ".type must be a string or an array of strings");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
        types.push_back("object");
    } else if (s.contains("items")) {
        types.push_back("array");
    } else {
        return any_value();
    }
    if (s.contains("nullable")) {  // checked: value() would throw nlohmann's type_error on a non-boolean
        if (!s["nullable"].is_boolean()) throw GrammarError(path + ".nullable must be true or false");
        if (s["nullable"].get<bool>()) types.push_back("null");
    }
    std::vector<int> alts;
    for (const auto& t : types) alts.push_back(compile_type(t, s, path));
    return alts.size() == 1 ? alts[0] : any_of(std::move(alts));
}

int JsonGrammar::compile_type(const std::string& type, const json& s, const std::string& path) {
    auto count = [&](const char* key, uint32_t fallback) {
        if (!s.contains(key)) return fallback;
        if (!s[key].is_number_unsigned()) throw GrammarError(path + "." + key + " must be a non-negative integer");
        return static_cast<uint32_t>(std::min<uint64_t>(s[key].get<uint64_t>(), UINT32_MAX));
    };
    if (type == "string") return add({.kind = Kind::String, .min_count = count("minLength", 0), .max_count = count("maxLength", UINT32_MAX)});
    if (type == "integer" || type == "number") return add({.kind = Kind::Number, .integer = type == "integer"});
    if (type == "boolean") return any_of({literal("true"), literal("false")});
    if (type == "null") return literal("null");
    if (type == "array") {
        const int items = s.contains("items") ? compile(s["items"], path + ".items") : any_value();
        Node n{.kind = Kind::Array, .items = items, .min_count = count("minItems", 0), .max_count = count("maxItems", UINT32_MAX)};
        if (n.min_count > n.max_count) throw GrammarError(path + ": minItems > maxItems");
        return add(std::move(n));
    }
    if (type == "object") {
        Node n{.kind = Kind::Object};
        if (s.contains("properties")) {
            if (!s["properties"].is_object()) throw GrammarError(path + ".properties must be an object");
            if (s["properties"].size() > kMaxProperties) throw GrammarError(path + ".properties: more than 64 properties");
            for (const auto& [name, sub] : s["properties"].items()) {
                if (name.find_first_of("\"\\") != std::string::npos || name.empty())
                    throw GrammarError(path + ".properties: the name '" + name + "' needs escaping");
                n.names.push_back(name);
                n.children.push_back(-1);  // compiled below (the vector may move while compiling)
            }
        }
        std::vector<int> values;
        if (s.contains("properties"))
            for (const auto& [name, sub] : s["properties"].items()) values.push_back(compile(sub, path + ".properties." + name));
        n.children = values;
        if (s.contains("required")) {
            if (!s["required"].is_array()) throw GrammarError(path + ".required must be an array");
            for (const auto& r : s["required"]) {
                const auto it = std::find(n.names.begin(), n.names.end(), r.is_string() ? r.get<std::string>() : "");
                if (it == n.names.end()) throw GrammarError(path + ".required names '" + r.dump() + "', which is not in properties");
                n.required |= uint64_t{1} << (it - n.names.begin());
            }
        }
        // Keys beyond the declared ones: as additionalProperties says; when absent, allowed only if no
        // properties are declared (a model asked for {"city"} should not wander off into other keys).
        const json none = json(n.names.empty());
        const json& extra = s.contains("additionalProperties") ? s["additionalProperties"] : none;
        if (!(extra.is_boolean() && !extra.get<bool>()))
            n.additional = extra.is_boolean() ? any_value() : compile(extra, path + ".additionalProperties");
        return add(std::move(n));
    }
    throw GrammarError(path + ".type '" + type + "' is not a JSON schema type");
}

// ---- matching ----

GrammarMatcher::GrammarMatcher(std::shared_ptr<const JsonGrammar> grammar) : g_(std::move(grammar)) {
    stacks_.push_back({Frame{.node = g_->root()}});
}

void GrammarMatcher::normalize(Stack s, std::vector<Stack>& out) const {
    // Expand the top until it is a frame that consumes bytes: alternatives fork, sequences step into parts.
    while (!s.empty()) {
        Frame& f = s.back();
        const auto& n = g_->node(f.node);
        if (n.kind == JsonGrammar::Kind::Union) {
            Stack base = s;
            base.pop_back();
            for (int alt : n.children) {
                if (out.size() >= kMaxStacks) return;
                Stack c = base;
                c.push_back(Frame{.node = alt});
                normalize(std::move(c), out);
            }
            return;
        }
        if (n.kind == JsonGrammar::Kind::Sequence) {
            if (f.count == n.children.size()) {
                s.pop_back();
                continue;
            }
            const int part = n.children[f.count++];
            s.push_back(Frame{.node = part});
            continue;
        }
        if (n.kind == JsonGrammar::Kind::Literal && n.text.empty()) {
            s.pop_back();
            continue;
        }
        break;
    }
    if (out.size() < kMaxStacks) out.push_back(std::move(s));
}

void GrammarMatcher::advance(Stack s, uint8_t c, std::vector<Stack>& out) const {
    std::vector<Stack> ready;
    normalize(std::move(s), ready);
    for (auto& r : ready) consume(std::move(r), c, out);
}

void GrammarMatcher::consume(Stack s, uint8_t c, std::vector<Stack>& out) const {
    if (s.empty()) return;  // the grammar is complete: only the end may follow
    Frame& f = s.back();
    const auto& n = g_->node(f.node);
    using K = JsonGrammar::Kind;
    auto done = [&] {
        s.pop_back();
        out.push_back(std::move(s));
    };
    auto keep = [&] { out.push_back(std::move(s)); };
    switch (n.kind) {
        case K::Literal:
            if (static_cast<uint8_t>(n.text[f.count]) != c) return;
            if (++f.count == n.text.size()) return done();
            return keep();
        case K::Text: {
            // key_pos: UTF-8 continuation bytes owed, checked on every byte (the terminator is whole characters,
            // so it can only begin where a character does); count: how much of the terminator the text ends with
            // (the longest such prefix, so a near miss such as "</para</parameter>" still closes).
            if (f.key_pos > 0) {
                if ((c & 0xC0) != 0x80) return;
                --f.key_pos;
            } else if (c >= 0x80) {
                if (c < 0xC2 || c > 0xF4) return;
                f.key_pos = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
            }
            const std::string& t = n.text;
            std::string tail = t.substr(0, f.count);
            tail.push_back(static_cast<char>(c));
            size_t k = std::min(tail.size(), t.size());
            while (k > 0 && tail.compare(tail.size() - k, k, t, 0, k) != 0) --k;
            if (k == t.size()) return done();
            f.count = static_cast<uint32_t>(k);
            return keep();
        }
        case K::String:
            switch (f.phase) {
                case 0:
                    if (c == '"') {
                        f.phase = 1;
                        return keep();
                    }
                    return;
                case 1:
                    // Well-formed UTF-8 across token boundaries: key_pos counts the continuation bytes owed.
                    if (f.key_pos > 0) {
                        if ((c & 0xC0) != 0x80) return;
                        --f.key_pos;
                        return keep();
                    }
                    if (c == '"') {
                        if (f.count >= n.min_count) done();
                        return;
                    }
                    if (f.count >= n.max_count || c < 0x20) return;
                    if (c == '\\') {
                        f.phase = 2;
                        return keep();
                    }
                    if (c >= 0x80) {
                        if (c < 0xC2 || c > 0xF4) return;
                        f.key_pos = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
                    }
                    ++f.count;
                    return keep();
                case 2:
                    if (c == 'u') {
                        f.phase = 3;
                        f.property = 0;
                        return keep();
                    }
                    if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return;
                    f.phase = 1;
                    ++f.count;
                    return keep();
                case 7:
                    if (c == '\\') {
                        f.phase = 8;
                        return keep();
                    }
                    return;  // a high surrogate's partner
                case 8:
                    if (c == 'u') {
                        f.phase = 9;
                        f.property = 0;
                        return keep();
                    }
                    return;
                default: {  // 3..6: four hex digits of \u; 9..12: those of the low surrogate after a high one
                    if (!is_hex(c)) return;
                    f.property = f.property * 16 + (is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
                    if (++f.phase == 7) {
                        if (f.property >= 0xDC00 && f.property <= 0xDFFF) return;  // a low surrogate alone
                        if (f.property < 0xD800 || f.property > 0xDBFF) {
                            f.phase = 1;
                            ++f.count;
                        }
                    } else if (f.phase == 13) {
                        if (f.property < 0xDC00 || f.property > 0xDFFF) return;
                        f.phase = 1;
                        ++f.count;
                    }
                    return keep();
                }
            }
        case K::Number: {
            // phases: 0 start, 1 after '-', 2 integer digits, 3 after a leading 0, 4 after '.', 5 fraction
            // digits, 6 after 'e', 7 after the exponent sign, 8 exponent digits. 2, 3, 5, 8 may end.
            const bool digit = is_digit(c) && f.count < kMaxNumberDigits;
            auto next = [&](uint8_t phase) {
                f.phase = phase;
                if (is_digit(c)) ++f.count;
                keep();
            };
            switch (f.phase) {
                case 0:
                    if (c == '-') return next(1);
                    [[fallthrough]];
                case 1:
                    if (c == '0') return next(3);
                    if (digit) return next(2);
                    return;
                case 2:
                    if (digit) return next(2);
                    [[fallthrough]];
                case 3:
                    if (!n.integer && c == '.') return next(4);
                    if (!n.integer && (c == 'e' || c == 'E')) return next(6);
                    break;
                case 4:
                    if (digit) return next(5);
                    return;
                case 5:
                    if (digit) return next(5);
                    if (c == 'e' || c == 'E') return next(6);
                    break;
                // Exponents of at most two digits: larger ones overflow a double.
                case 6:
                    if (c == '+' || c == '-') return next(7);
                    [[fallthrough]];
                case 7:
                    if (is_digit(c)) {
                        f.key_pos = 1;
                        f.phase = 8;
                        return keep();
                    }
                    return;
                case 8:
                    if (is_digit(c) && f.key_pos < 2) {
                        ++f.key_pos;
                        return keep();
                    }
                    break;
            }
            // The number ended one byte ago: that byte belongs to what follows it.
            s.pop_back();
            return advance(std::move(s), c, out);
        }
        case K::Array:
            switch (f.phase) {
                case 0:
                    if (c == '[') {
                        f.phase = 1;
                        return keep();
                    }
                    return;
                case 1:
                    if (c == ']') {
                        if (n.min_count == 0) done();
                        return;
                    }
                    break;
                case 2:
                    if (c == ',' && f.count < n.max_count) {
                        f.phase = 3;
                        return keep();
                    }
                    if (c == ']' && f.count >= n.min_count) return done();
                    return;
                case 3:
                    if (c == ' ') {
                        f.phase = 4;
                        return keep();
                    }
                    break;
                default: break;
            }
            f.phase = 2;
            ++f.count;
            s.push_back(Frame{.node = n.items});
            return advance(std::move(s), c, out);
        case K::Object: {
            const size_t np = n.names.size();
            const uint64_t all = np == 64 ? ~uint64_t{0} : (uint64_t{1} << np) - 1;
            auto start_key = [&] {
                f.key_match = all & ~f.seen;
                f.key_pos = 0;
                if (f.key_match == 0 && n.additional < 0) return;
                f.phase = 2;
                keep();
            };
            switch (f.phase) {
                case 0:
                    if (c == '{') {
                        f.phase = 1;
                        return keep();
                    }
                    return;
                case 1:
                    if (c == '}') {
                        if ((n.required & ~f.seen) == 0) done();
                        return;
                    }
                    if (c == '"') return start_key();
                    return;
                case 2:  // inside a key
                    if (c == '"') {
                        for (size_t i = 0; i < np; ++i)
                            if ((f.key_match >> i & 1) && n.names[i].size() == f.key_pos) {
                                f.property = static_cast<int32_t>(i);
                                f.seen |= uint64_t{1} << i;
                                f.phase = 3;
                                return keep();
                            }
                        if (n.additional < 0) return;
                        f.property = -1;
                        f.phase = 3;
                        return keep();
                    }
                    if (c < 0x20 || c == '\\') return;
                    for (size_t i = 0; i < np; ++i)
                        if ((f.key_match >> i & 1) && (n.names[i].size() <= f.key_pos || static_cast<uint8_t>(n.names[i][f.key_pos]) != c))
                            f.key_match &= ~(uint64_t{1} << i);
                    if (f.key_match == 0 && n.additional < 0) return;
                    ++f.key_pos;
                    return keep();
                case 3:
                    if (c == ':') {
                        f.phase = 4;
                        return keep();
                    }
                    return;
                case 4:
                    if (c == ' ') {
                        f.phase = 5;
                        return keep();
                    }
                    [[fallthrough]];
                case 5:
                    f.phase = 6;
                    s.push_back(Frame{.node = f.property >= 0 ? n.children[static_cast<size_t>(f.property)] : n.additional});
                    return advance(std::move(s), c, out);
                case 6:
                    if (c == '}') {
                        if ((n.required & ~f.seen) == 0) done();
                        return;
                    }
                    if (c == ',' && ((all & ~f.seen) != 0 || n.additional >= 0)) {
                        f.phase = 7;
                        return keep();
                    }
                    return;
                case 7:
                    if (c == ' ') {
                        f.phase = 8;
                        return keep();
                    }
                    [[fallthrough]];
                default:
                    if (c == '"') return start_key();
                    return;
            }
        }
        default: return;
    }
}

bool GrammarMatcher::feed_byte(uint8_t c, std::vector<Stack>& stacks) const {
    std::vector<Stack> next;
    for (auto& s : stacks) advance(s, c, next);
    if (next.empty()) return false;
    stacks = std::move(next);
    return true;
}

bool GrammarMatcher::feed(std::string_view bytes) {
    std::vector<Stack> stacks = stacks_;
    for (char ch : bytes)
        if (!feed_byte(static_cast<uint8_t>(ch), stacks)) return false;
    stacks_ = std::move(stacks);
    return true;
}

bool GrammarMatcher::can_end_stack(Stack s) const {
    std::vector<Stack> ready;
    normalize(std::move(s), ready);
    for (auto& r : ready) {
        if (r.empty()) return true;
        const Frame& f = r.back();
        const auto& n = g_->node(f.node);
        if (n.kind == JsonGrammar::Kind::Number && (f.phase == 2 || f.phase == 3 || f.phase == 5 || f.phase == 8)) {
            r.pop_back();
            if (can_end_stack(std::move(r))) return true;
        }
    }
    return false;
}

bool GrammarMatcher::can_end() const {
    for (const auto& s : stacks_)
        if (can_end_stack(s)) return true;
    return false;
}

}  // namespace moe
