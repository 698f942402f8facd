// DeepSeek-V4 (Flash, Pro): the model ships its prompt format as a Python encoder (encoding/encoding_dsv4.py
// beside the weights) rather than a template, so files carry none or a community one. Rendered as that
// encoder renders: the system text bare after BOS, then <｜User｜> turns and <｜Assistant｜> turns closed by
// <｜end▁of▁sentence｜>; a user turn hands over with <｜Assistant｜><think> (thinking) or <｜Assistant｜></think>;
// no tool role: results join the user turn as <tool_result> blocks, in the order the calls were made; tools
// declared after the first system message; calls as DSML, each parameter marked string="true" (the text as it
// is) or string="false" (JSON). In thinking mode without tools, turns before the last user message lose their
// reasoning ("drop_thinking"); with tools every turn keeps it.
#include "engine/server/chat_family.h"

#include <algorithm>

namespace moe::deepseek {
namespace {
using namespace moe::chat;

const std::string kEos = "<｜end▁of▁sentence｜>", kUser = "<｜User｜>", kAssistant = "<｜Assistant｜>";
const std::string kCalls = "<｜DSML｜tool_calls>", kCallsEnd = "</｜DSML｜tool_calls>", kInvoke = "<｜DSML｜invoke name=\"",
                  kInvokeEnd = "</｜DSML｜invoke>", kParam = "<｜DSML｜parameter name=\"", kParamEnd = "</｜DSML｜parameter>";

// The encoder's REASONING_EFFORT_MAX, put before the first message in thinking mode at effort "max".
const char* const kEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously "
    "stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected "
    "hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

std::string tools_text(const std::vector<ToolSpec>& tools) {
    std::string schemas;
    for (const ToolSpec& t : tools) schemas += (schemas.empty() ? "" : "\n") + python_json(t.declaration.value("function", ordered_json::object()));
    return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"" + kCalls +
           "\" block like the following:\n\n" + kCalls + "\n" + kInvoke + "$TOOL_NAME\">\n" + kParam +
           "$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE" + kParamEnd + "\n...\n" + kInvokeEnd + "\n" + kInvoke +
           "$TOOL_NAME2\">\n...\n" + kInvokeEnd + "\n" + kCallsEnd +
           "\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), "
           "pass the value in JSON format and set `string=\"false\"`.\n\n"
           "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any "
           "tool calls or final response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n"
           "### Available Tool Schemas\n\n" +
           schemas + "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

std::string calls_text(const std::vector<ToolCall>& calls) {
    std::string s = "\n\n" + kCalls + "\n";
    for (size_t k = 0; k < calls.size(); ++k) {
        s += (k ? "\n" : "") + kInvoke + calls[k].name + "\">\n";
        // Arguments that are not a JSON object go as one string parameter named "arguments", as the encoder does.
        ordered_json args = ordered_json::parse(calls[k].arguments, nullptr, false);
        if (!args.is_object()) args = ordered_json{{"arguments", calls[k].arguments}};
        bool first = true;
        for (const auto& [key, v] : args.items()) {
            s += (first ? "" : "\n") + kParam + key + "\" string=\"" +
                 (v.is_string() ? "true\">" + v.get<std::string>() : "false\">" + python_json(v)) + kParamEnd;
            first = false;
        }
        s += "\n" + kInvokeEnd;
    }
    return s + "\n" + kCallsEnd;
}

// The conversation as the encoder sees it after merging: tool results (and user text after them) inside user
// turns, system and assistant turns as they came.
struct Turn {
    std::string role;
    const ChatMessage* message = nullptr;    // system / assistant
    std::vector<const ChatMessage*> blocks;  // user: text (role "user") and tool-result blocks, in order
};

std::vector<Turn> merge_turns(const std::vector<ChatMessage>& ms) {
    std::vector<Turn> turns;
    std::vector<std::string> call_order;  // the ids of the latest assistant turn's calls
    for (const ChatMessage& m : ms) {
        if (m.role == "user" || m.role == "tool") {
            if (turns.empty() || turns.back().role != "user") turns.push_back({"user", nullptr, {}});
            turns.back().blocks.push_back(&m);
            continue;
        }
        if (m.role != "system" && m.role != "assistant") continue;
        turns.push_back({m.role, &m, {}});
    }
    // Several results in one turn go in the order of the calls they answer (by tool_call_id; unknown ids first).
    for (Turn& t : turns) {
        if (t.role == "assistant") {
            call_order.clear();
            for (const ToolCall& c : t.message->tool_calls) call_order.push_back(c.id);
            continue;
        }
        if (t.role != "user" || call_order.empty()) continue;
        std::vector<const ChatMessage*> results;
        for (const ChatMessage* b : t.blocks)
            if (b->role == "tool") results.push_back(b);
        if (results.size() < 2) continue;
        auto rank = [&](const ChatMessage* b) {
            const auto it = std::find(call_order.begin(), call_order.end(), b->tool_call_id);
            return it == call_order.end() || b->tool_call_id.empty() ? 0 : static_cast<long>(it - call_order.begin());
        };
        std::stable_sort(results.begin(), results.end(), [&](const ChatMessage* a, const ChatMessage* b) { return rank(a) < rank(b); });
        size_t next = 0;
        for (const ChatMessage*& b : t.blocks)
            if (b->role == "tool") b = results[next++];
    }
    return turns;
}

std::vector<ChatSegment> render_v4(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(false);
    std::vector<Turn> turns = merge_turns(ms);
    // Tools go with the first system message; without one, an empty one opens the conversation.
    size_t tools_at = turns.size();
    if (!options.tools.empty()) {
        for (size_t i = 0; i < turns.size() && tools_at == turns.size(); ++i)
            if (turns[i].role == "system") tools_at = i;
        if (tools_at == turns.size()) {
            turns.insert(turns.begin(), Turn{"system", nullptr, {}});
            tools_at = 0;
        }
    }
    const bool drop_thinking = options.tools.empty();
    size_t last_user = turns.size();  // none
    for (size_t i = 0; i < turns.size(); ++i)
        if (turns[i].role == "user") last_user = i;
    // Whether an index is past (or at) the last user turn; with no user turn, every index is.
    const auto at_or_after_last_user = [&](size_t i, bool strictly) {
        return last_user == turns.size() || (strictly ? i > last_user : i >= last_user);
    };

    o.text(options.bos_text);
    if (thinking && options.reasoning_effort == ReasoningEffort::Max) o.text(kEffortMax);
    for (size_t i = 0; i < turns.size(); ++i) {
        const Turn& t = turns[i];
        if (t.role == "system") {
            o.text((t.message ? t.message->content : std::string()) + (i == tools_at ? "\n\n" + tools_text(options.tools) : ""));
        } else if (t.role == "user") {
            std::string text = kUser;
            for (size_t b = 0; b < t.blocks.size(); ++b)
                text += (b ? "\n\n" : "") +
                        (t.blocks[b]->role == "tool" ? "<tool_result>" + t.blocks[b]->content + "</tool_result>" : t.blocks[b]->content);
            o.text(text);
        } else {
            const ChatMessage& m = *t.message;
            const bool keeps_reasoning = thinking && (!drop_thinking || at_or_after_last_user(i, true));
            // This server's own turn goes back as its tokens where the encoder would show all it produced: after
            // </think> (chat mode), or with its reasoning kept.
            if (m.generated && !m.generated->empty() && (!thinking || keeps_reasoning)) {
                o.tokens(*m.generated);
            } else {
                const auto [reasoning, answer] = split_thinking(m.content);
                o.text((keeps_reasoning ? reasoning + "</think>" : "") + answer + (m.tool_calls.empty() ? "" : calls_text(m.tool_calls)));
            }
            o.text(kEos);
        }
        // A user turn hands over to the assistant turn that follows it, or to the generation.
        const bool last = i + 1 == turns.size();
        if (t.role != "user" || (!last && turns[i + 1].role != "assistant") || (last && !options.add_generation_prompt)) continue;
        o.text(kAssistant + (thinking && (!drop_thinking || at_or_after_last_user(i, false)) ? "<think>" : "</think>"));
    }
    return o.take();
}

// `KEY" string="true|false">VALUE</｜DSML｜parameter>` pieces, whitespace between them.
bool parse_parameters(const std::string& inner, ordered_json& args) {
    size_t pos = 0;
    for (;;) {
        pos = inner.find_first_not_of(" \t\r\n", pos);
        if (pos == std::string::npos) return true;
        if (inner.compare(pos, kParam.size(), kParam) != 0) return false;
        const size_t key_end = inner.find("\" string=\"", pos + kParam.size());
        if (key_end == std::string::npos) return false;
        const std::string key = inner.substr(pos + kParam.size(), key_end - pos - kParam.size());
        const size_t flag = key_end + 10;
        const bool is_string = inner.compare(flag, 6, "true\">") == 0;
        if (!is_string && inner.compare(flag, 7, "false\">") != 0) return false;
        const size_t value_at = flag + (is_string ? 6 : 7), value_end = inner.find(kParamEnd, value_at);
        if (key.empty() || value_end == std::string::npos || args.contains(key)) return false;
        const std::string raw = inner.substr(value_at, value_end - value_at);
        ordered_json v = is_string ? ordered_json(raw) : ordered_json::parse(raw, nullptr, false);
        args[key] = v.is_discarded() ? ordered_json(raw) : v;  // a non-JSON "false" value is kept as its text
        pos = value_end + kParamEnd.size();
    }
}

// The invokes of a <｜DSML｜tool_calls> block.
bool parse_calls(const std::string& body, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    std::vector<ToolCall> calls;
    size_t pos = 0;
    for (;;) {
        pos = body.find_first_not_of(" \t\r\n", pos);
        if (pos == std::string::npos) break;
        if (body.compare(pos, kInvoke.size(), kInvoke) != 0) return false;
        const size_t name_end = body.find("\">", pos + kInvoke.size()), end = body.find(kInvokeEnd, pos);
        if (name_end == std::string::npos || end == std::string::npos || name_end > end) return false;
        ToolCall c;
        c.name = body.substr(pos + kInvoke.size(), name_end - pos - kInvoke.size());
        ordered_json args = ordered_json::object();
        if (!parse_parameters(body.substr(name_end + 2, end - name_end - 2), args) || !finish_call(c, args, tools)) return false;
        calls.push_back(std::move(c));
        pos = end + kInvokeEnd.size();
    }
    for (auto& c : calls) out.push_back(std::move(c));
    return !calls.empty();
}

std::string call_head(const std::string& name) { return kInvoke + name + "\">\n"; }

}  // namespace

const ChatFamilyFormat kV4{"deepseek-v4",
                           render_v4,
                           {"\n\n" + kCalls + "\n", "", false,
                            TagArguments{.key_open = kParam,
                                         .key_close = "\" string=\"false\">",
                                         .value_close = kParamEnd + "\n",
                                         .end = kInvokeEnd + "\n" + kCallsEnd,
                                         .key_close_string = "\" string=\"true\">"}},
                           call_head,
                           {kCalls},
                           kCallsEnd,
                           parse_calls};

}  // namespace moe::deepseek
