#include "engine/server/chat_harmony.h"

#include "engine/server/chat_family.h"

#include <ctime>

namespace moe::harmony {
namespace {

const std::string kStart = "<|start|>", kMessage = "<|message|>", kEnd = "<|end|>", kReturn = "<|return|>", kCall = "<|call|>",
                  kChannel = "<|channel|>";

std::string join(const ordered_json& items, const std::string& sep) {
    std::string s;
    for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + (items[i].is_string() ? items[i].get<std::string>() : items[i].dump());
    return s;
}

bool contains(const ordered_json& list, const std::string& name) {
    if (!list.is_array()) return false;
    for (const auto& v : list)
        if (v.is_string() && v.get<std::string>() == name) return true;
    return false;
}

std::string text_of(const ordered_json& v) { return v.is_string() ? v.get<std::string>() : python_json(v); }

// The template's render_typescript_type: a JSON schema as a TypeScript type, with its quirks (a property's type
// on its own line after 16 spaces, oneOf defaults after 20, a newline after each oneOf " | ").
std::string ts_type(const ordered_json& spec) {
    if (!spec.is_object()) return "any";
    const ordered_json type = spec.value("type", ordered_json());
    const bool nullable = spec.value("nullable", false);
    if (type == "array") {
        std::string s = "any[]";
        if (spec.contains("items")) {
            const ordered_json items = spec["items"];
            const ordered_json it = items.is_object() ? items.value("type", ordered_json()) : ordered_json();
            if (it == "string") s = "string[]";
            else if (it == "number" || it == "integer") s = "number[]";
            else if (it == "boolean") s = "boolean[]";
            else {
                const std::string inner = ts_type(items);
                s = inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]";
            }
        }
        return s + (nullable ? " | null" : "");
    }
    if (type.is_array() && !type.empty()) return type.size() > 1 ? join(type, " | ") : text_of(type[0]);
    if (spec.contains("oneOf") && spec["oneOf"].is_array() && !spec["oneOf"].empty()) {
        const ordered_json& variants = spec["oneOf"];
        bool has_object = false;
        for (const auto& v : variants) has_object = has_object || (v.is_object() && v.value("type", ordered_json()) == "object");
        if (has_object && variants.size() > 1) return "any";
        std::string s;
        for (size_t i = 0; i < variants.size(); ++i) {
            const ordered_json& v = variants[i];
            s += ts_type(v);
            if (v.is_object() && v.contains("description") && !text_of(v["description"]).empty()) s += "// " + text_of(v["description"]);
            if (v.is_object() && v.contains("default")) s += std::string(20, ' ') + "// default: " + python_json(v["default"]);
            if (i + 1 < variants.size()) s += " | \n";  // the template keeps the newline after its " | "
        }
        return s;
    }
    if (type == "string") {
        if (spec.contains("enum") && spec["enum"].is_array() && !spec["enum"].empty()) return "\"" + join(spec["enum"], "\" | \"") + "\"";
        return std::string("string") + (nullable ? " | null" : "");
    }
    if (type == "number" || type == "integer") return "number";
    if (type == "boolean") return "boolean";
    if (type == "object") {
        if (!spec.contains("properties") || !spec["properties"].is_object() || spec["properties"].empty()) return "object";
        const ordered_json required = spec.value("required", ordered_json::array());
        std::string s = "{\n";
        size_t i = 0;
        for (const auto& [name, prop] : spec["properties"].items()) {
            s += name + (contains(required, name) ? "" : "?") + ": \n" + std::string(16, ' ') + ts_type(prop);
            if (++i < spec["properties"].size()) s += ", ";
        }
        return s + "}";
    }
    return "any";
}

// The developer message's tool declarations (render_tool_namespace).
std::string tool_namespace(const std::vector<ToolSpec>& tools) {
    std::string s = "## functions\n\nnamespace functions {\n\n";
    for (const auto& t : tools) {
        s += "// " + t.description + "\n" + "type " + t.name + " = ";
        const ordered_json& p = t.parameters;
        if (!p.is_object() || !p.contains("properties") || !p["properties"].is_object() || p["properties"].empty()) {
            s += "() => any;\n\n";
            continue;
        }
        s += "(_: {\n";
        const ordered_json required = p.value("required", ordered_json::array());
        for (const auto& [name, spec] : p["properties"].items()) {
            if (spec.is_object() && spec.contains("description") && !text_of(spec["description"]).empty())
                s += "// " + text_of(spec["description"]) + "\n";
            s += name + (contains(required, name) ? "" : "?") + ": " + ts_type(spec);
            if (spec.is_object() && spec.contains("default")) {
                if (spec.contains("enum")) s += ", // default: " + text_of(spec["default"]);
                else if (spec.contains("oneOf")) s += "// default: " + text_of(spec["default"]);
                else s += ", // default: " + python_json(spec["default"]);
            }
            s += ",\n";
        }
        s += "}) => any;\n\n";
    }
    return s + "} // namespace functions";
}

std::string day_utc(int64_t unix_time) {
    const std::time_t t = unix_time ? static_cast<std::time_t>(unix_time) : std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
}

// A turn's reasoning and answer from our content form ("<think>\n...\n</think>\n\n" + answer).
std::pair<std::string, std::string> thinking_and_answer(const std::string& content) {
    const size_t close = content.find("</think>");
    if (close == std::string::npos) return {"", content};
    std::string thinking = content.substr(0, close);
    if (thinking.rfind("<think>", 0) == 0) thinking.erase(0, 7);
    while (!thinking.empty() && thinking.front() == '\n') thinking.erase(0, 1);
    while (!thinking.empty() && thinking.back() == '\n') thinking.pop_back();
    return {thinking, strip_thinking(content)};
}

}  // namespace

std::string call_head(const std::string& name) { return name + " <|constrain|>json" + kMessage; }

std::vector<ChatSegment> render(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
    const auto& tools = opt.tools;
    std::string s = kStart + "system" + kMessage;
    s += "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n";
    s += "Current date: " + day_utc(opt.date_unix) + "\n\n";
    s += std::string("Reasoning: ") + effort_name(opt.reasoning_effort) + "\n\n";
    s += "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
    if (!tools.empty()) s += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    s += kEnd;

    // The first message, when it is a system or developer message, becomes the developer message's instructions.
    const bool first_is_instructions = !ms.empty() && (ms[0].role == "system" || ms[0].role == "developer");
    const std::string instructions = first_is_instructions ? ms[0].content : "";
    if (!instructions.empty() || !tools.empty()) {
        s += kStart + "developer" + kMessage;
        if (!instructions.empty()) s += "# Instructions\n\n" + instructions + "\n\n";
        if (!tools.empty()) s += "# Tools\n\n" + tool_namespace(tools);
        s += kEnd;
    }
    std::string last_call;  // tool results answer the latest call (the template keeps one call per turn)
    for (size_t i = first_is_instructions ? 1 : 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            const auto [thinking, answer] = thinking_and_answer(m.content);
            if (!m.tool_calls.empty()) {
                // Its reasoning shows only while no later answer closed the tool loop.
                bool later_answer = false;
                for (size_t j = i + 1; j < ms.size(); ++j) later_answer = later_answer || (ms[j].role == "assistant" && ms[j].tool_calls.empty());
                const std::string& analysis = !answer.empty() ? answer : thinking;
                if (!analysis.empty() && !later_answer) s += kStart + "assistant" + kChannel + "analysis" + kMessage + analysis + kEnd;
                const ToolCall& c = m.tool_calls.front();
                s += kStart + "assistant to=functions." + c.name + kChannel + "commentary json" + kMessage +
                     python_json(arguments_object(c.arguments)) + kCall;
                last_call = c.name;
            } else if (i + 1 == ms.size() && !opt.add_generation_prompt) {
                if (!thinking.empty()) s += kStart + "assistant" + kChannel + "analysis" + kMessage + thinking + kEnd;
                s += kStart + "assistant" + kChannel + "final" + kMessage + answer + kReturn;
            } else {
                s += kStart + "assistant" + kChannel + "final" + kMessage + answer + kEnd;  // earlier reasoning is dropped
                last_call.clear();
            }
        } else if (m.role == "tool") {
            s += kStart + "functions." + (last_call.empty() ? std::string("unknown") : last_call) + " to=assistant" + kChannel + "commentary" +
                 kMessage + python_json(m.content) + kEnd;
        } else if (m.role == "user") {
            s += kStart + "user" + kMessage + m.content + kEnd;
        }
    }
    if (opt.add_generation_prompt) s += kStart + "assistant";
    return {{s, {}}};
}

void OutputParser::end_message(std::vector<OutputEvent>& out, std::vector<ToolCall>& calls) {
    if (recipient_.rfind("functions.", 0) == 0 && opt_.parse_tools) {
        const ordered_json args = ordered_json::parse(call_body_, nullptr, false);
        if (!args.is_discarded() && args.is_object()) {
            ToolCall c{opt_.call_id_prefix + std::to_string(calls.size()), recipient_.substr(10), args.dump()};
            calls.push_back(c);
            out.push_back({OutputEvent::Call, "", c});
        } else {  // not JSON: shown as text, never an error
            out.push_back({OutputEvent::Content, call_body_, {}});
        }
    }
    call_body_.clear();
    channel_.clear();
    recipient_.clear();
    state_ = State::Header;
}

void OutputParser::push(const std::string& piece, std::vector<OutputEvent>& out, std::vector<ToolCall>& calls, bool final) {
    buf_ += piece;
    // --reasoning-format none: every message's text as it came, markers included, as the answer; tool calls are
    // still taken out.
    const bool raw = !opt_.split_reasoning;
    auto is_call = [&] { return opt_.parse_tools && recipient_.rfind("functions.", 0) == 0; };
    for (;;) {
        if (state_ == State::Header) {
            // A header starts with a marker, or with the recipient right after the generation prompt
            // ("<|start|>assistant" + " to=functions.x<|channel|>..."). Text before one is answer text (a model
            // that writes no Harmony header at all).
            auto begins = [&](const std::string& p) { return buf_.compare(0, p.size(), p, 0, std::min(p.size(), buf_.size())) == 0; };
            const bool recipient_first = at_start_ && (begins(" to=") || begins("to="));
            if (!recipient_first && buf_.rfind("<|", 0) != 0) {
                const size_t marker = buf_.find("<|");
                const size_t n = marker != std::string::npos ? marker : final ? buf_.size() : buf_.size() - partial_marker_tail(buf_, {"<|"});
                if (n > 0) out.push_back({OutputEvent::Content, buf_.substr(0, n), {}}), at_start_ = false;
                buf_.erase(0, n);
                if (marker == std::string::npos) return;
                continue;
            }
            const size_t m = buf_.find(kMessage);
            if (m == std::string::npos) {
                // The output ended inside a header: a cut marker is dropped, other text (or, raw, all) is answer.
                if (final && !buf_.empty() && (raw || buf_.rfind("<|", 0) != 0)) out.push_back({OutputEvent::Content, buf_, {}});
                if (final) buf_.clear();
                return;
            }
            at_start_ = false;
            const std::string header = buf_.substr(0, m);
            buf_.erase(0, m + kMessage.size());
            auto word_after = [&](const std::string& key) {
                const size_t p = header.rfind(key);
                if (p == std::string::npos) return std::string();
                const size_t a = p + key.size(), b = header.find_first_of(" <", a);
                return header.substr(a, (b == std::string::npos ? header.size() : b) - a);
            };
            channel_ = word_after(kChannel);
            recipient_ = word_after("to=");
            if (raw && !is_call()) out.push_back({OutputEvent::Content, header + kMessage, {}});
            state_ = State::Body;
            continue;
        }
        // Body: up to the message's end marker; text that may begin a marker waits for the next piece.
        size_t end = std::string::npos;
        std::string closer;
        for (const std::string& k : {kEnd, kReturn, kCall, kStart})
            if (const size_t p = buf_.find(k); p < end) end = p, closer = k;
        const size_t take = end != std::string::npos ? end
                            : final                  ? buf_.size()
                                                     : buf_.size() - partial_marker_tail(buf_, {kEnd, kReturn, kCall, kStart});
        const std::string text = buf_.substr(0, take);
        // A message cut off by the next one's <|start|> (no <|end|>): that marker opens the next header.
        buf_.erase(0, end == std::string::npos ? take : closer == kStart ? end : end + closer.size());
        if (is_call()) call_body_ += text;
        else if (!text.empty()) out.push_back({channel_ == "analysis" && !raw ? OutputEvent::Reasoning : OutputEvent::Content, text, {}});
        if (end == std::string::npos) {
            if (final) end_message(out, calls);
            return;
        }
        if (raw && !is_call() && closer != kStart) out.push_back({OutputEvent::Content, closer, {}});
        end_message(out, calls);
    }
}

// The parser reads the headers' control tokens, which gpt-oss files mark as such (llama-server preserves them too).
const ChatFamilyFormat kHarmony{"harmony",
                                render,
                                {kCallOpen, kCallTail, true},
                                call_head,
                                {},
                                "",
                                nullptr,
                                {"<think>", "</think>"},
                                kFinalHeader,
                                true,
                                {},
                                {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"}};

}  // namespace moe::harmony
