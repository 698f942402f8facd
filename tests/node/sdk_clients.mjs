// The official OpenAI and Anthropic SDKs against a live `moestream serve` (started by
// tests/test_sdk_clients.cpp): chat, streaming, a tool-call round trip, logprobs, json_schema output, and
// Anthropic messages with streaming tool_use. Usage: node sdk_clients.mjs PORT API_KEY. Exits 1 naming the
// first check that failed.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const [port, apiKey] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey, maxRetries: 0 });

function check(cond, what, detail) {
  if (!cond) {
    console.error(`FAIL: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer" } }, required: ["unit", "days"] },
  },
}];
const validArgs = (text) => {
  const a = JSON.parse(text);
  return (a.unit === "c" || a.unit === "f") && Number.isInteger(a.days);
};

// Models and a plain chat.
const models = await openai.models.list();
check(models.data.length === 1, "models.list", models.data);
const chat = await openai.chat.completions.create({ model: models.data[0].id, messages: [{ role: "user", content: "Hello" }], max_tokens: 8, temperature: 0 });
check(chat.choices[0].message.role === "assistant" && typeof chat.choices[0].message.content === "string", "chat.completions.create", chat.choices[0]);
check(chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, "usage adds up", chat.usage);

// Streaming: the deltas add up to the same greedy answer.
const stream = await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hello" }], max_tokens: 8, temperature: 0, stream: true });
let streamed = "";
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
check(streamed === chat.choices[0].message.content, "streamed text equals the plain answer", [streamed, chat.choices[0].message.content]);

// A tool round trip: a forced call, its result, then an answer.
const messages = [{ role: "user", content: "Weather in Oslo?" }];
const call = await openai.chat.completions.create({ model: "m", messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 200, temperature: 0 });
const tc = call.choices[0].message.tool_calls?.[0];
check(call.choices[0].finish_reason === "tool_calls" && tc?.function.name === "get_weather" && validArgs(tc.function.arguments), "tool call", call.choices[0]);
messages.push(call.choices[0].message, { role: "tool", tool_call_id: tc.id, content: "21C" });
const answer = await openai.chat.completions.create({ model: "m", messages, tools, max_tokens: 6, temperature: 0 });
check(answer.timings === undefined || answer.timings.prompt_reused >= call.usage.prompt_tokens, "tool result turn reuses the prefix", answer.timings);
check(typeof answer.choices[0].message.content === "string", "answer after the tool result", answer.choices[0]);

// The SDK's own stream helper accumulates delta.tool_calls into a message.
const runner = openai.chat.completions.stream({ model: "m", messages: [{ role: "user", content: "Weather?" }], tools, tool_choice: "required", max_tokens: 200, temperature: 0 });
const final = await runner.finalChatCompletion();
const sc = final.choices[0].message.tool_calls?.[0];
check(sc?.function.name === "get_weather" && validArgs(sc.function.arguments), "streamed tool call (stream helper)", final.choices[0]);

// Logprobs.
const lp = await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
const content = lp.choices[0].logprobs?.content ?? [];
check(content.length === lp.usage.completion_tokens && content.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0), "logprobs", lp.choices[0].logprobs);

// json_schema output, parsed by the SDK's helper.
const schema = { type: "object", properties: { ok: { type: "boolean" }, n: { type: "integer" } }, required: ["ok", "n"], additionalProperties: false };
const js = await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "JSON" }], max_tokens: 100, temperature: 0,
  response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } } });
const parsed = JSON.parse(js.choices[0].message.content);
check(typeof parsed.ok === "boolean" && Number.isInteger(parsed.n), "json_schema output", js.choices[0].message.content);

// Errors surface as the SDK's typed errors.
try {
  await openai.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] });
  check(false, "unknown model is an error");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, "unknown model -> NotFoundError", String(e));
}

// Anthropic: a plain message, then streaming with a forced tool_use.
const msg = await anthropic.messages.create({ model: "m", max_tokens: 8, system: "Be brief.", messages: [{ role: "user", content: "Hello" }] });
check(msg.type === "message" && msg.content.length >= 1 && msg.usage.output_tokens > 0, "anthropic messages.create", msg);
const atools = [{ name: "get_weather", description: "Weather", input_schema: tools[0].function.parameters }];
const astream = anthropic.messages.stream({ model: "m", max_tokens: 200, temperature: 0, tools: atools, tool_choice: { type: "any" },
  messages: [{ role: "user", content: "Weather?" }] });
const amsg = await astream.finalMessage();
const use = amsg.content.find((b) => b.type === "tool_use");
check(amsg.stop_reason === "tool_use" && use?.name === "get_weather" && validArgs(JSON.stringify(use.input)), "anthropic streamed tool_use", amsg);
const after = await anthropic.messages.create({ model: "m", max_tokens: 6, tools: atools, messages: [
  { role: "user", content: "Weather?" }, { role: "assistant", content: amsg.content },
  { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "21C" }] }] });
check(after.type === "message" && after.usage.cache_read_input_tokens > 0, "anthropic tool_result turn", after.usage);
const counted = await anthropic.messages.countTokens({ model: "m", messages: [{ role: "user", content: "Hello" }] });
check(counted.input_tokens > 0, "anthropic countTokens", counted);
try {
  await new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: "wrong", maxRetries: 0 }).messages.create({ model: "m", max_tokens: 4, messages: [{ role: "user", content: "x" }] });
  check(false, "wrong key is an error");
} catch (e) {
  check(e instanceof Anthropic.AuthenticationError, "wrong key -> AuthenticationError", String(e));
}
console.log("all SDK checks passed");
