#include "engine/server/chat_output.h"

#include "engine/server/chat_harmony.h"
#include "engine/server/chat_minimax.h"

namespace moe {

namespace {

constexpr const char* kSpace = " \t\r\n";

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(kSpace), b = s.find_last_not_of(kSpace);
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// The calls in a section (DeepSeek, Kimi): call-begin ... call-end pieces with only whitespace between them.
bool split_section(const std::string& text, const std::string& begin, const std::string& end, std::vector<std::string>& parts) {
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t b = text.find(begin, pos);
        if (b == std::string::npos) return trim(text.substr(pos)).empty() && !parts.empty();
        if (!trim(text.substr(pos, b - pos)).empty()) return false;
        const size_t e = text.find(end, b + begin.size());
        parts.push_back(text.substr(b + begin.size(), (e == std::string::npos ? text.size() : e) - b - begin.size()));
        pos = e == std::string::npos ? text.size() : e + end.size();
    }
    return !parts.empty();
}

const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                  kDsSep = "<｜tool▁sep｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kKimiSectionBegin = "<|tool_calls_section_begin|>", kKimiCallBegin = "<|tool_call_begin|>",
                  kKimiArgs = "<|tool_call_argument_begin|>", kKimiCallEnd = "<|tool_call_end|>", kKimiSectionEnd = "<|tool_calls_section_end|>";

}  // namespace

size_t partial_marker_tail(const std::string& s, const std::vector<std::string>& markers) {
    size_t best = 0;
    for (const auto& m : markers)
        for (size_t k = std::min(m.size() - 1, s.size()); k > best; --k)
            if (s.compare(s.size() - k, k, m, 0, k) == 0) {
                best = k;
                break;
            }
    return best;
}

ChatOutputParser::ChatOutputParser(ChatFamily family, OutputParserOptions opt)
    : family_(family), opt_(std::move(opt)), think_(think_markers(family)) {
    switch (family_) {
        case ChatFamily::DeepSeek:
        case ChatFamily::DeepSeekV31:
            call_open_ = {kDsCallsBegin, kDsCallBegin};
            call_close_ = kDsCallsEnd;
            break;
        case ChatFamily::KimiK2:
            call_open_ = {kKimiSectionBegin, kKimiCallBegin};
            call_close_ = kKimiSectionEnd;
            break;
        case ChatFamily::MiniMax:
            call_open_ = {minimax::kCallOpen};
            call_close_ = minimax::kCallClose;
            break;
        case ChatFamily::MiniMaxM3:
            call_open_ = {minimax::kM3CallOpen};
            call_close_ = minimax::kM3CallClose;
            break;
        default: call_open_ = {"<tool_call>"}; call_close_ = "</tool_call>";
    }
    if (!opt_.split_reasoning) state_ = State::Content;
    else if (opt_.starts_in_reasoning) state_ = State::Reasoning;
    if (family_ == ChatFamily::Harmony) harmony_ = std::make_unique<harmony::OutputParser>(opt_);
}

ChatOutputParser::ChatOutputParser(ChatOutputParser&&) noexcept = default;
ChatOutputParser& ChatOutputParser::operator=(ChatOutputParser&&) noexcept = default;
ChatOutputParser::~ChatOutputParser() = default;

std::vector<OutputEvent> ChatOutputParser::push(const std::string& piece) {
    std::vector<OutputEvent> out;
    if (harmony_) return harmony_step(piece, false);
    buf_ += piece;
    step(out, false);
    return out;
}

std::vector<OutputEvent> ChatOutputParser::finish() {
    if (harmony_) return harmony_step("", true);
    std::vector<OutputEvent> out;
    step(out, true);
    held_space_.clear();
    return out;
}

std::vector<OutputEvent> ChatOutputParser::harmony_step(const std::string& piece, bool final) {
    std::vector<OutputEvent> out;
    harmony_->push(piece, out, calls_, final);
    for (const auto& e : out) {
        if (e.kind == OutputEvent::Reasoning) reasoning_ += e.text;
        else if (e.kind == OutputEvent::Content) content_ += e.text;
    }
    return out;
}

void ChatOutputParser::emit_text(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string text, bool section_end) {
    // Sections (reasoning, answer) are trimmed as llama-server trims them: leading whitespace is dropped,
    // trailing whitespace is held until more text shows it was inside the section.
    if (!section_started_) {
        const size_t first = text.find_first_not_of(kSpace);
        if (first == std::string::npos) return;
        text.erase(0, first);
        section_started_ = true;
    }
    std::string full = held_space_ + text;
    held_space_.clear();
    const size_t last = full.find_last_not_of(kSpace);
    const size_t keep = last == std::string::npos ? 0 : last + 1;
    if (!section_end) held_space_ = full.substr(keep);
    full.resize(keep);
    if (full.empty()) return;
    (kind == OutputEvent::Reasoning ? reasoning_ : content_) += full;
    out.push_back({kind, std::move(full), {}});
}

void ChatOutputParser::step(std::vector<OutputEvent>& out, bool final) {
    for (;;) {
        switch (state_) {
            case State::Start: {
                // A model may open its think block itself (Qwen3, GLM-4.5), or write a bare close for a turn
                // without reasoning (MiniMax-M3): only at the very beginning.
                const size_t p = buf_.find_first_not_of(kSpace);
                if (p == std::string::npos) {
                    if (final) buf_.clear();
                    return;
                }
                const std::string rest = buf_.substr(p);
                if (starts_with(rest, think_.open) || starts_with(rest, think_.close)) {
                    const bool opens = starts_with(rest, think_.open);
                    buf_.erase(0, p + (opens ? think_.open : think_.close).size());
                    state_ = opens ? State::Reasoning : State::Content;
                    continue;
                }
                if (!final && (think_.open.compare(0, rest.size(), rest) == 0 || think_.close.compare(0, rest.size(), rest) == 0)) return;
                state_ = State::Content;
                continue;
            }
            case State::Reasoning: {
                const size_t q = buf_.find(think_.close);
                if (q != std::string::npos) {
                    emit_text(out, OutputEvent::Reasoning, buf_.substr(0, q), true);
                    buf_.erase(0, q + think_.close.size());
                    state_ = State::Content;
                    section_started_ = false;
                    held_space_.clear();
                    continue;
                }
                const size_t keep = final ? 0 : partial_marker_tail(buf_, {think_.close});
                emit_text(out, OutputEvent::Reasoning, buf_.substr(0, buf_.size() - keep), final);
                buf_.erase(0, buf_.size() - keep);
                return;
            }
            case State::Content: {
                size_t pos = std::string::npos;
                std::string marker;
                if (opt_.parse_tools)
                    for (const auto& m : call_open_)
                        if (const size_t p = buf_.find(m); p < pos) pos = p, marker = m;
                if (pos != std::string::npos) {
                    emit_text(out, OutputEvent::Content, buf_.substr(0, pos), true);
                    held_space_.clear();
                    buf_.erase(0, pos + marker.size());
                    open_marker_ = marker;
                    state_ = State::Call;
                    continue;
                }
                const size_t keep = final || !opt_.parse_tools ? 0 : partial_marker_tail(buf_, call_open_);
                emit_text(out, OutputEvent::Content, buf_.substr(0, buf_.size() - keep), final);
                buf_.erase(0, buf_.size() - keep);
                return;
            }
            case State::Call: {
                const size_t q = buf_.find(call_close_);
                if (q == std::string::npos && !final) return;
                const bool closed = q != std::string::npos;
                const std::string body = buf_.substr(0, closed ? q : buf_.size());
                buf_.erase(0, closed ? q + call_close_.size() : buf_.size());
                std::vector<ToolCall> calls;
                section_started_ = false;
                if (parse_call_body(body, calls)) {
                    for (auto& c : calls) {
                        c.id = opt_.call_id_prefix + std::to_string(calls_.size());
                        calls_.push_back(c);
                        out.push_back({OutputEvent::Call, "", c});
                    }
                } else {
                    emit_text(out, OutputEvent::Content, open_marker_ + body + (closed ? call_close_ : ""), true);
                }
                section_started_ = false;
                state_ = State::Content;
                if (final && buf_.empty()) return;
                continue;
            }
        }
    }
}

bool ChatOutputParser::parse_call_body(const std::string& body, std::vector<ToolCall>& out) const {
    std::vector<std::string> parts;
    switch (family_) {
        case ChatFamily::DeepSeek:
        case ChatFamily::DeepSeekV31:
            if (!split_section(open_marker_ == kDsCallBegin ? kDsCallBegin + body : body, kDsCallBegin, kDsCallEnd, parts)) return false;
            break;
        case ChatFamily::KimiK2:
            if (!split_section(open_marker_ == kKimiCallBegin ? kKimiCallBegin + body : body, kKimiCallBegin, kKimiCallEnd, parts)) return false;
            break;
        case ChatFamily::MiniMax: return minimax::parse_calls(body, opt_.tools, out);
        case ChatFamily::MiniMaxM3: return minimax::parse_calls_m3(body, opt_.tools, out);
        default: parts.push_back(body);
    }
    for (const auto& p : parts) {
        ToolCall c;
        if (!parse_one(p, c)) return false;
        out.push_back(std::move(c));
    }
    return true;
}

bool ChatOutputParser::parse_one(const std::string& raw, ToolCall& call) const {
    ordered_json args = ordered_json::object();
    std::string body = trim(raw);
    auto json_object = [&](const std::string& text) {
        ordered_json j = ordered_json::parse(trim(text), nullptr, false);
        if (!j.is_object()) return false;
        args = std::move(j);
        return true;
    };
    switch (family_) {
        case ChatFamily::Harmony:
        case ChatFamily::MiniMax:
        case ChatFamily::MiniMaxM3: return false;  // their own files parse their calls
        case ChatFamily::ChatML:
        case ChatFamily::Qwen3: {  // {"name": ..., "arguments": {...}}
            ordered_json j = ordered_json::parse(body, nullptr, false);
            if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
            call.name = j["name"].get<std::string>();
            const ordered_json a = j.contains("arguments") ? j["arguments"] : j.value("parameters", ordered_json::object());
            if (a.is_string()) {
                if (!json_object(a.get<std::string>())) return false;
            } else if (a.is_object()) {
                args = a;
            } else {
                return false;
            }
            break;
        }
        case ChatFamily::Qwen35: {  // <function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>
            if (!starts_with(body, "<function=")) return false;
            const size_t gt = body.find('>');
            if (gt == std::string::npos) return false;
            call.name = trim(body.substr(10, gt - 10));
            const ToolSpec* tool = find_tool(opt_.tools, call.name);
            size_t pos = gt + 1;
            for (;;) {
                const size_t p = body.find("<parameter=", pos);
                if (p == std::string::npos) break;
                if (!trim(body.substr(pos, p - pos)).empty()) return false;
                const size_t name_end = body.find('>', p);
                const size_t close = name_end == std::string::npos ? std::string::npos : body.find("</parameter>", name_end);
                if (close == std::string::npos) return false;
                const std::string key = trim(body.substr(p + 11, name_end - p - 11));
                std::string value = body.substr(name_end + 1, close - name_end - 1);
                if (starts_with(value, "\n")) value.erase(0, 1);
                if (!value.empty() && value.back() == '\n') value.pop_back();
                args[key] = tag_argument_value(tool, key, value);
                pos = close + 12;
            }
            const std::string tail = trim(body.substr(pos));
            if (!tail.empty() && tail != "</function>") return false;
            break;
        }
        case ChatFamily::Glm4:
        case ChatFamily::Glm47: {  // NAME<arg_key>K</arg_key><arg_value>V</arg_value>...
            const size_t first_key = body.find("<arg_key>");
            call.name = trim(body.substr(0, first_key));
            const ToolSpec* tool = find_tool(opt_.tools, call.name);
            size_t pos = first_key == std::string::npos ? body.size() : first_key;
            while (pos < body.size()) {
                const size_t k = body.find("<arg_key>", pos);
                if (k == std::string::npos || !trim(body.substr(pos, k - pos)).empty()) return false;
                const size_t ke = body.find("</arg_key>", k);
                const size_t v = ke == std::string::npos ? ke : body.find("<arg_value>", ke);
                const size_t ve = v == std::string::npos ? v : body.find("</arg_value>", v);
                if (ve == std::string::npos || !trim(body.substr(ke + 10, v - ke - 10)).empty()) return false;
                const std::string key = trim(body.substr(k + 9, ke - k - 9));
                args[key] = tag_argument_value(tool, key, body.substr(v + 11, ve - v - 11));
                pos = ve + 12;
                if (trim(body.substr(pos)).empty()) break;
            }
            break;
        }
        case ChatFamily::DeepSeek:
        case ChatFamily::DeepSeekV31: {  // NAME<sep>ARGS (V3.1) or function<sep>NAME\n```json\nARGS\n``` (V3)
            const size_t sep = body.find(kDsSep);
            if (sep == std::string::npos) return false;
            const std::string head = trim(body.substr(0, sep)), rest = body.substr(sep + kDsSep.size());
            if (head == "function") {
                const size_t nl = rest.find('\n'), fence = rest.find("```json"), fence_end = rest.rfind("```");
                if (nl == std::string::npos || fence == std::string::npos || fence_end <= fence) return false;
                call.name = trim(rest.substr(0, nl));
                if (!json_object(rest.substr(fence + 7, fence_end - fence - 7))) return false;
            } else {
                call.name = head;
                if (!json_object(rest)) return false;
            }
            break;
        }
        case ChatFamily::KimiK2: {  // functions.NAME:N<|tool_call_argument_begin|>ARGS
            const size_t a = body.find(kKimiArgs);
            if (a == std::string::npos) return false;
            std::string id = trim(body.substr(0, a));
            if (starts_with(id, "functions.")) id.erase(0, 10);
            if (const size_t colon = id.rfind(':'); colon != std::string::npos && id.find_first_not_of("0123456789", colon + 1) == std::string::npos)
                id.resize(colon);
            call.name = id;
            if (!json_object(body.substr(a + kKimiArgs.size()))) return false;
            break;
        }
    }
    if (call.name.empty() || (!opt_.tools.empty() && !find_tool(opt_.tools, call.name))) return false;
    call.arguments = args.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return true;
}

}  // namespace moe
