#include "engine/server/chat_session.h"

#include <algorithm>

namespace moe {

namespace {

std::vector<int32_t> tokens_of(const std::vector<ChatSegment>& segs, const std::string& tail, const Tokenizer& tok) {
    std::vector<int32_t> out;
    auto add_text = [&](const std::string& text) {
        auto ids = tok.encode(text, out.empty(), true);
        out.insert(out.end(), ids.begin(), ids.end());
    };
    for (const auto& seg : segs) {
        if (!seg.tokens.empty()) out.insert(out.end(), seg.tokens.begin(), seg.tokens.end());
        else add_text(seg.text);
    }
    if (!tail.empty()) add_text(tail);  // on its own: a forced call's opening is a separate run of tokens
    return out;
}

// A tool's arguments as a grammar: its parameter schema, or any object when the schema uses what constrained
// decoding does not support (the call is still forced; its arguments are then only held to be an object).
int arguments_grammar(JsonGrammar& g, const ToolSpec& tool) {
    if (tool.parameters.empty()) return g.any_object();
    try {
        return g.from_schema(nlohmann::json::parse(tool.parameters.dump()));
    } catch (const GrammarError&) { return g.any_object(); }
}

// The values of a property that takes one of some strings (enum or const), or none.
std::optional<std::vector<std::string>> string_choices(const ordered_json& property) {
    if (!property.is_object()) return std::nullopt;
    const ordered_json choices = property.contains("enum")    ? property["enum"]
                                 : property.contains("const") ? ordered_json::array({property["const"]})
                                                              : ordered_json();
    if (!choices.is_array() || choices.empty()) return std::nullopt;
    std::vector<std::string> out;
    for (const auto& c : choices) {
        if (!c.is_string()) return std::nullopt;
        out.push_back(c.get<std::string>());
    }
    return out;
}

// A tag-style call's arguments and its end: the schema's properties in their declared order, the required ones
// always, each value as its parameter takes it (one of its enum's strings, text up to the closing tag for other
// strings, else JSON held to the property's schema, or any JSON value where that uses what constrained decoding
// does not support).
int tag_arguments_grammar(JsonGrammar& g, const ToolSpec& tool, const TagArguments& tags) {
    std::vector<int> parts;
    const ordered_json& schema = tool.parameters;
    if (schema.is_object() && schema.contains("properties") && schema["properties"].is_object()) {
        std::vector<std::string> required;
        if (schema.contains("required") && schema["required"].is_array())
            for (const auto& r : schema["required"])
                if (r.is_string()) required.push_back(r.get<std::string>());
        for (const auto& [key, property] : schema["properties"].items()) {
            const std::string close = tags.close_names_key ? tags.value_close + key + tags.key_close : tags.value_close;
            const std::string type = property.is_object() && property.contains("type") && property["type"].is_string()
                                         ? property["type"].get<std::string>()
                                         : "";
            const auto choices = string_choices(property);
            const bool is_string = parameter_is_string(&tool, key);
            int value;
            if (choices) {  // written bare, as the templates write strings
                std::vector<int> alts;
                for (const std::string& c : *choices) alts.push_back(g.literal(c + close));
                value = g.any_of(std::move(alts));
            } else if (is_string || (tags.nested_values && (type == "object" || type == "array"))) {
                value = g.text_until(close);
            } else {
                int json_value;
                try {
                    json_value = g.from_schema(nlohmann::json::parse(property.dump()));
                } catch (const GrammarError&) { json_value = g.any_value(); }
                value = g.sequence({json_value, g.literal(close)});
            }
            const std::string& key_close = (is_string || choices) && !tags.key_close_string.empty() ? tags.key_close_string : tags.key_close;
            const int argument = g.sequence({g.literal(tags.key_open + key + key_close), value});
            const bool needed = std::find(required.begin(), required.end(), key) != required.end();
            parts.push_back(needed ? argument : g.any_of({argument, g.literal("")}));
        }
    }
    parts.push_back(g.literal(tags.end));
    return g.sequence(std::move(parts));
}

int call_arguments_grammar(JsonGrammar& g, const ToolSpec& tool, const CallSyntax& syntax) {
    return syntax.tags ? tag_arguments_grammar(g, tool, *syntax.tags) : arguments_grammar(g, tool);
}

}  // namespace

std::shared_ptr<const JsonGrammar> forced_call_grammar(const ChatInput& in, ChatFamily family) {
    const CallSyntax syntax = call_syntax(family);
    if (!syntax.json_arguments && !syntax.tags) return nullptr;
    auto g = std::make_shared<JsonGrammar>();
    int call;
    if (in.tool_choice == ToolChoice::Named) {
        call = call_arguments_grammar(*g, *find_tool(in.tools, in.forced_tool), syntax);
    } else {
        std::vector<int> alts;
        for (const auto& t : in.tools) alts.push_back(g->sequence({g->literal(call_head(family, t.name)), call_arguments_grammar(*g, t, syntax)}));
        call = g->any_of(std::move(alts));
    }
    g->set_root(g->sequence({call, g->literal(syntax.tail)}));
    return g;
}

std::vector<int32_t> shown_control_tokens(ChatFamily family, const Tokenizer& tok) {
    std::vector<int32_t> ids;
    for (const std::string& marker : output_markers(family))
        for (const int32_t id : tok.encode(marker, false, true))
            if (tok.piece(id, false).empty() && !tok.piece(id, true).empty() && !tok.is_eog(id) && std::find(ids.begin(), ids.end(), id) == ids.end())
                ids.push_back(id);
    return ids;
}

PreparedChat prepare_chat(const ChatInput& in, const ChatFormat& format, const Tokenizer& tok, bool recurrent) {
    PreparedChat p;
    // tool_choice "none" keeps the tools in the prompt (the prefix stays the one the agent's other turns share)
    // but parses no calls.
    const bool use_tools = !in.tools.empty() && in.tool_choice != ToolChoice::None;
    const bool forced = use_tools && (in.tool_choice == ToolChoice::Required || in.tool_choice == ToolChoice::Named);
    // A constrained answer starts at the first token: no think block before it.
    const bool constrained = forced || in.response_schema.has_value();
    if (forced) {
        p.grammar = forced_call_grammar(in, format.family);
    } else if (in.response_schema) {
        auto g = std::make_shared<JsonGrammar>();
        g->set_root(g->from_schema(*in.response_schema));
        p.grammar = g;
    }
    ChatRenderOptions opt{.add_generation_prompt = true,
                          .enable_thinking = constrained ? std::optional<bool>(false) : in.thinking,
                          .bos_text = format.bos_text,
                          .tools = in.tools,
                          .reasoning_effort = in.reasoning_effort,
                          .date_unix = 0,
                          .tool_choice = in.tools.empty()                         ? ""
                                         : in.tool_choice == ToolChoice::Required ? "required"
                                         : in.tool_choice == ToolChoice::None     ? "none"
                                                                                  : "",
                          .response_format = in.response_format,
                          .response_schema = in.response_schema ? ordered_json::parse(in.response_schema->dump()) : ordered_json()};
    const auto segs = render_chat(format.family, in.messages, opt);
    if (forced) p.prefill = forced_call_prefix(format.family, in.tool_choice == ToolChoice::Named ? in.forced_tool : "");
    else if (in.response_schema) p.prefill = constrained_answer_prefix(format.family);
    p.prompt = tokens_of(segs, p.prefill, tok);

    // Where a generated turn goes when the next request sends it back: render the history with a placeholder
    // turn and see how much of this prompt comes before it.
    if (forced) {
        std::vector<ChatMessage> with_turn = in.messages;
        with_turn.emplace_back("assistant", "", std::vector<int32_t>{-1});
        ChatRenderOptions history_opt = opt;
        history_opt.add_generation_prompt = false;
        const auto hsegs = render_chat(format.family, with_turn, history_opt);
        size_t k = 0;
        while (k < hsegs.size() && hsegs[k].tokens != std::vector<int32_t>{-1}) ++k;
        if (k < hsegs.size()) {
            const auto head = tokens_of(std::vector<ChatSegment>(hsegs.begin(), hsegs.begin() + static_cast<long>(k)), "", tok);
            if (head.size() <= p.prompt.size() && std::equal(head.begin(), head.end(), p.prompt.begin()))
                p.splice_from = static_cast<int>(head.size());
        }
    }

    // The output starts inside a think block when the generation prompt opened one.
    std::string end = segs.empty() || !segs.back().tokens.empty() ? "" : segs.back().text;
    while (!end.empty() && (end.back() == '\n' || end.back() == ' ')) end.pop_back();
    p.parser.split_reasoning = format.split_reasoning;
    const std::string think_open = think_markers(format.family).open;
    p.parser.starts_in_reasoning = !constrained && end.size() >= think_open.size() &&
                                   end.compare(end.size() - think_open.size(), think_open.size(), think_open) == 0;
    p.parser.parse_tools = use_tools;
    p.shown_controls = shown_control_tokens(format.family, tok);
    p.parser.tools = in.tools;

    // A recurrent model keeps a state snapshot where the last user message starts: the next conversation with
    // the same system prompt and history, or a retry of this turn, restarts from there.
    if (recurrent) {
        const auto& msgs = in.messages;
        size_t last_user = msgs.size();
        while (last_user > 0 && msgs[last_user - 1].role != "user") --last_user;
        if (last_user > 1) {
            opt.add_generation_prompt = false;
            const auto head = tokens_of(
                render_chat(format.family, std::vector<ChatMessage>(msgs.begin(), msgs.begin() + static_cast<long>(last_user - 1)), opt), "", tok);
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
