#include "engine/server/chat_output.h"

#include "engine/server/chat_family.h"
#include "engine/server/chat_harmony.h"

namespace moe {

namespace {
constexpr const char* kSpace = " \t\r\n";
using chat::starts_with;
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
    : format_(&chat_format(family)), opt_(std::move(opt)), call_open_(format_->call_open), call_close_(format_->call_close), think_(format_->think) {
    if (!opt_.split_reasoning) state_ = State::Content;
    else if (opt_.starts_in_reasoning) state_ = State::Reasoning;
    if (format_->channels) harmony_ = std::make_unique<harmony::OutputParser>(opt_);
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
                size_t frame_pos = std::string::npos;
                std::string frame;
                for (const auto& m : format_->frame)
                    if (const size_t p = buf_.find(m); p < frame_pos) frame_pos = p, frame = m;
                if (frame_pos < pos) {  // framing around the answer (Kimi K3's response channel): dropped
                    emit_text(out, OutputEvent::Content, buf_.substr(0, frame_pos), false);
                    buf_.erase(0, frame_pos + frame.size());
                    continue;
                }
                if (pos != std::string::npos) {
                    emit_text(out, OutputEvent::Content, buf_.substr(0, pos), true);
                    held_space_.clear();
                    buf_.erase(0, pos + marker.size());
                    open_marker_ = marker;
                    state_ = State::Call;
                    continue;
                }
                std::vector<std::string> markers = format_->frame;
                if (opt_.parse_tools) markers.insert(markers.end(), call_open_.begin(), call_open_.end());
                const size_t keep = final ? 0 : partial_marker_tail(buf_, markers);
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
    return format_->parse_calls && format_->parse_calls(body, open_marker_, opt_.tools, out);
}

}  // namespace moe
