// The llama.cpp peer for benchmarks: node-llama-cpp's prebuilt llama.cpp (CPU) on the same GGUF file, same
// thread count, same prompt length and generated tokens as `moestream bench`. Prints one JSON line:
// {"prompt_tokens_per_s", "gen_tokens_per_s", "n_prompt", "n_gen", "threads", "llama_cpp"}.
//
//   node bench/llamacpp_peer.mjs MODEL.gguf PROMPT_TOKENS GEN_TOKENS THREADS [CACHE_TYPE_K CACHE_TYPE_V]
// The cache types are llama.cpp's -ctk / -ctv spellings (f16, q8_0, ...; default f16).
// Needs `npm install node-llama-cpp` (bench/vs-llama.sh does it in a scratch folder).
import {getLlama} from "node-llama-cpp";

const [model_path, n_prompt_s, n_gen_s, threads_s, ctk = "f16", ctv = ctk] = process.argv.slice(2);
if (!model_path) {
    console.error("usage: node llamacpp_peer.mjs MODEL.gguf PROMPT_TOKENS GEN_TOKENS THREADS [CACHE_TYPE_K CACHE_TYPE_V]");
    process.exit(2);
}
const n_prompt = Number(n_prompt_s ?? 128), n_gen = Number(n_gen_s ?? 64), threads = Number(threads_s ?? 2);
const llama = await getLlama({gpu: false, build: "never", maxThreads: threads, logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0, useMmap: true});
const context = await model.createContext({contextSize: n_prompt + n_gen + 16, batchSize: 512, threads, flashAttention: true,
                                           experimentalKvCacheKeyType: ctk.toUpperCase(), experimentalKvCacheValueType: ctv.toUpperCase()});
const vocab = model.tokens;
// The same prompt ids moestream bench feeds: (i * 7919 + 13) mod n_vocab.
const n_vocab = model.fileInfo.tensorInfo.find(t => t.name === "token_embd.weight").dimensions[1];
const prompt = Array.from({length: n_prompt}, (_, i) => (i * 7919 + 13) % Number(n_vocab));

const seq = context.getSequence();
let t0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(prompt);
const t_pp = (performance.now() - t0) / 1000;

// Generation speed: one token per step with its logits computed and a greedy pick, as `moestream bench`
// does. (evaluateWithoutGeneratingNewTokens would request no logits, and llama.cpp then skips the output
// head and the last layer's feed-forward: about 1/n_layer less work than a real decode step.) The token fed
// back is replaced by the prompt's ids so that an end-of-generation token on a random-weight model cannot
// cut the run short.
let generated = 0;
t0 = performance.now();
const steps = seq.evaluate([prompt[0]], {temperature: 0, yieldEogToken: true});
for (let r = await steps.next(); !r.done; r = await steps.next(prompt[generated % n_prompt]))
    if (++generated >= n_gen) break;
await steps.return();
const t_tg = (performance.now() - t0) / 1000;
console.log(JSON.stringify({prompt_tokens_per_s: n_prompt / t_pp, gen_tokens_per_s: generated / t_tg, n_prompt, n_gen: generated, threads,
                            cache_types: ctk + "/" + ctv,
                            llama_cpp: "node-llama-cpp's llama.cpp build " + llama.llamaCppRelease.release + ", " + llama.cpuMathCores + " math cores"}));
await context.dispose();
await model.dispose();
