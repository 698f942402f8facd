#include "engine/server/chat_session.h"

namespace moe {

namespace {

std::vector<int32_t> tokens_of(const std::vector<ChatSegment>& segs, const std::string& tail, const Tokenizer& tok) {
    std::vector<int32_t> out;
    auto add_text = [&](const std::string& text) {
        auto ids = tok.encode(text, out.empty(), true);
        out.insert(out.end(), ids.begin(), ids.end());
    };
    for (size_t i = 0; i < segs.size(); ++i) {
        if (!segs[i].tokens.empty()) out.insert(out.end(), segs[i].tokens.begin(), segs[i].tokens.end());
        else add_text(i + 1 == segs.size() ? segs[i].text + tail : segs[i].text);
    }
    if ((segs.empty() || !segs.back().tokens.empty()) && !tail.empty()) add_text(tail);
    return out;
}

}  // namespace

PreparedChat prepare_chat(const ChatInput& in, const ChatFormat& format, const Tokenizer& tok, bool recurrent) {
    PreparedChat p;
    const bool use_tools = !in.tools.empty() && in.tool_choice != ToolChoice::None;
    const bool forced = use_tools && (in.tool_choice == ToolChoice::Required || in.tool_choice == ToolChoice::Named);
    ChatRenderOptions opt{.add_generation_prompt = true, .enable_thinking = forced ? std::optional<bool>(false) : in.thinking,
                          .bos_text = format.bos_text, .tools = use_tools ? in.tools : std::vector<ToolSpec>{}};
    const auto segs = render_chat(format.family, in.messages, opt);
    if (forced) p.prefill = forced_call_prefix(format.family, in.tool_choice == ToolChoice::Named ? in.forced_tool : "");
    p.prompt = tokens_of(segs, p.prefill, tok);

    // The output starts inside a think block when the generation prompt opened one.
    std::string end = segs.empty() || !segs.back().tokens.empty() ? "" : segs.back().text;
    while (!end.empty() && (end.back() == '\n' || end.back() == ' ')) end.pop_back();
    p.parser.split_reasoning = format.split_reasoning;
    p.parser.starts_in_reasoning = !forced && end.size() >= 7 && end.compare(end.size() - 7, 7, "<think>") == 0;
    p.parser.parse_tools = use_tools;
    p.parser.tools = in.tools;

    // A recurrent model keeps a state snapshot where the last user message starts: the next conversation with
    // the same system prompt and history, or a retry of this turn, restarts from there.
    if (recurrent) {
        const auto& msgs = in.messages;
        size_t last_user = msgs.size();
        while (last_user > 0 && msgs[last_user - 1].role != "user") --last_user;
        if (last_user > 1) {
            opt.add_generation_prompt = false;
            const auto head = tokens_of(render_chat(format.family, std::vector<ChatMessage>(msgs.begin(), msgs.begin() + static_cast<long>(last_user - 1)), opt), "", tok);
            if (!head.empty() && head.size() < p.prompt.size() && std::equal(head.begin(), head.end(), p.prompt.begin()))
                p.checkpoint_at.push_back(static_cast<int>(head.size()));
        }
    }
    return p;
}

std::string turn_key(const std::string& content, const std::vector<ToolCall>& calls) {
    std::string key = content;
    for (const auto& c : calls) {
        const ordered_json args = ordered_json::parse(c.arguments, nullptr, false);
        key += "\x1e" + c.name + "\x1f" + (args.is_discarded() ? c.arguments : args.dump());
    }
    return key;
}

}  // namespace moe
