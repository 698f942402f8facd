// NextN/MTP drafts: the block loads only when asked for, as a one-layer model beside the trunk; handing the
// trunk's hidden rows to it changes no trunk bit; greedy decoding with its drafts gives token for token and logit
// for logit what decoding without them gives (prompts over several chunks, drafts of 1 to 4 tokens); the block's
// rows follow the trunk through rejections; a file without a block (or of an architecture whose block is not
// run) is refused with one line.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/forward/mtp_draft.h"
#include "engine/forward/speculative.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "tests/greedy_decode.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using test::decode_plain;
using test::Decoded;
using test::expect_same;

// `extra`: more mkmodel options; `embd`: the width; the file is dir/<name>.gguf (name: the architecture).
std::string make_mtp_model(const test::TempDir& dir, const std::string& arch, const std::vector<std::string>& extra = {},
                           const std::string& embd = "128", std::string name = "") {
    const std::string out = dir / ((name.empty() ? arch : name) + ".gguf");
    std::vector<std::string> args = {"mkmodel",
                                     "--vocab-builtin",
                                     "--arch",
                                     arch,
                                     "--layers",
                                     "3",
                                     "--embd",
                                     embd,
                                     "--heads",
                                     "4",
                                     "--experts",
                                     "8",
                                     "--experts-used",
                                     "2",
                                     "--ffn",
                                     "64",
                                     "--nextn",
                                     "1",
                                     "--seed",
                                     "11",
                                     "--shared-experts",
                                     "1",
                                     "--out",
                                     out};
    if (arch == "qwen35moe") args.insert(args.end(), {"--full-attention-interval", "2"});  // layers 0 and 2 DeltaNet
    else if (arch == "deepseek4")  // a window layer, a ratio-4 (indexed) and a ratio-8 one; the block a window layer
        args.insert(args.end(), {"--compress-ratios", "0,4,8", "--head-dim", "32", "--rope-dims", "8", "--q-lora", "32", "--window", "5",
                                 "--indexer-heads", "2", "--indexer-dim", "64", "--indexer-top-k", "2", "--hash-layers", "1"});
    else args.insert(args.end(), {"--dense-layers", "1"});
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

struct Drafted {
    Decoded d;
    int drafted = 0, kept = 0;
    uint64_t block_rows = 0, redone = 0;
};

// Greedy decoding verifying `depth` MTP drafts every step (forced: no planner).
Drafted decode_mtp(const Model& m, const RunnerOptions& ro, const std::vector<int32_t>& prompt, int n, int depth) {
    Runner r(m, ro);
    MtpDraft mtp(m, ro);
    r.set_hidden_sink(mtp.hidden_sink());
    Drafted out;
    out.d = test::decode_steps(r, prompt, n, [&](Sampler& s, std::vector<int32_t>& history, int room, const EmitToken& emit) {
        std::vector<int32_t> drafts = mtp.draft(0, history.back(), std::min(depth, room), r.n_past());
        EXPECT_EQ(static_cast<int>(drafts.size()), std::max(0, std::min(depth, room)));
        const StepOutcome o = speculative_step(r, s, history, drafts, emit);
        out.drafted += static_cast<int>(drafts.size());
        out.kept += o.accepted;
        return o;
    });
    out.block_rows = mtp.rows_evaluated();
    out.redone = mtp.rows_redone();
    return out;
}

TEST(MtpLoad, TheBlockLoadsOnlyWhenAskedAsAOneLayerModel) {
    test::TempDir dir;
    for (const std::string arch : {"glm4moe", "deepseek2", "glm-dsa", "qwen35moe", "deepseek4"}) {
        const GgufModel file = open_gguf_model(make_mtp_model(dir, arch));
        const auto plain = load_model(file);
        EXPECT_FALSE(plain->mtp) << arch;
        const auto m = load_model(file, {.experts = {}, .mtp = true});
        ASSERT_TRUE(m->mtp) << arch;
        EXPECT_EQ(m->hp.n_layer, 3u) << arch;
        EXPECT_EQ(m->layers.size(), 3u) << arch;
        const Model& b = *m->mtp;
        EXPECT_EQ(b.layers.size(), 1u);
        EXPECT_EQ(b.hp.n_layer, 1u);
        EXPECT_TRUE(b.layers[0].moe) << arch << ": the block's feed-forward is a MoE";
        EXPECT_EQ(b.layers[0].attn, arch == "qwen35moe" ? AttentionKind::Gqa : m->layers[2].attn) << arch << ": full attention";
        EXPECT_TRUE(b.nextn.eh_proj.present() && b.nextn.enorm.present() && b.nextn.hnorm.present() && b.nextn.head_norm.present());
        EXPECT_EQ(b.tok_embd.data, m->tok_embd.data) << "no embed_tokens in the file: the trunk's embeddings";
        EXPECT_EQ(b.output.data, m->output.data) << "no shared_head_head: the trunk's output head";
        EXPECT_GT(b.experts->bytes_in_ram(), 0u) << "the block's experts are read into RAM";
        EXPECT_EQ(b.layers[0].indexer_full, arch == "glm-dsa") << arch;
    }
}

// A block whose eh_proj contradicts the trunk's width is one ModelError naming the tensor and both shapes, and
// only when the block is asked for (without drafts the file loads as before).
TEST(MtpLoad, ABlockShapedAgainstTheTrunkIsRefusedByName) {
    test::TempDir dir;
    const GgufFile f = read_gguf_header(make_mtp_model(dir, "glm4moe"));
    std::vector<GgufTensorData> tensors;
    for (const auto& t : f.tensors) {
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        if (t.name == "blk.3.nextn.eh_proj.weight") {
            d.ne = {t.ne[0], t.ne[1] / 2};  // [2E, E/2]
            d.bytes.resize(t.nbytes / 2);
        }
        tensors.push_back(std::move(d));
    }
    const std::string out = dir / "bad-block.gguf";
    write_gguf(out, f.kv, tensors);
    const GgufModel file = open_gguf_model(out);
    EXPECT_NO_THROW(load_model(file));
    try {
        load_model(file, {.experts = {}, .mtp = true});
        ADD_FAILURE() << "a block of the wrong width loaded";
    } catch (const ModelError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("blk.3.nextn.eh_proj.weight"), std::string::npos) << what;
        EXPECT_NE(what.find("[256, 128]"), std::string::npos) << what;
    }
}

// Handing the hidden rows over runs each prompt chunk's last feed-forward over every row: the logits rows keep
// their bits all the same, and the drafts (right or wrong) never change a token or a logit.
TEST(MtpGreedy, DraftsOfTheBlockNeverChangeTheTokens) {
    test::TempDir dir;
    for (const std::string arch : {"glm4moe", "deepseek2", "glm-dsa", "qwen35moe", "deepseek4"}) {
        const GgufModel file = open_gguf_model(make_mtp_model(dir, arch));
        const auto m = load_model(file, {.experts = {}, .mtp = true});
        const int V = static_cast<int>(m->hp.n_vocab);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 29; ++i) prompt.push_back((7 + 37 * i) % V);
        // n_batch 8: the prompt is 4 chunks, the block catches up chunk by chunk.
        const RunnerOptions ro{.n_ctx = 96, .n_threads = 2, .n_batch = 8};
        const int n = 16;
        const Decoded plain = decode_plain(*m, ro, prompt, n);
        for (int depth : {1, 2, 4}) {
            const Drafted got = decode_mtp(*m, ro, prompt, n, depth);
            const std::string what = arch + ", " + std::to_string(depth) + " drafts a step";
            expect_same(plain, got.d, what);
            EXPECT_GT(got.drafted, 0) << what;
            // Every trunk position gets one block row, plus the chained rows of each step's deeper drafts.
            EXPECT_GE(got.block_rows, prompt.size() + static_cast<size_t>(n) - 2) << what;
            EXPECT_EQ(got.redone, 0u) << what << ": every cut of the block's cache lands on a snapshot or needs none";
        }
    }
}

// The hidden-state pass repeats a prompt chunk's last layer over every row: the routing profile (and trace)
// count that layer's choices once, as without it.
TEST(MtpDraft, HandingHiddenRowsOverCountsEachRoutingOnce) {
    test::TempDir dir;
    const GgufModel file = open_gguf_model(make_mtp_model(dir, "glm4moe"));
    const auto m = load_model(file, {.experts = {}, .mtp = true});
    std::vector<int32_t> prompt;
    for (int i = 0; i < 21; ++i) prompt.push_back((2 + 13 * i) % static_cast<int>(m->hp.n_vocab));
    const RunnerOptions ro{.n_ctx = 64, .n_threads = 2, .n_batch = 8};
    Runner plain(*m, ro), fed(*m, ro);
    MtpDraft mtp(*m, ro);
    fed.set_hidden_sink(mtp.hidden_sink());
    plain.eval(prompt);
    fed.eval(prompt);
    EXPECT_EQ(plain.expert_selections(), fed.expert_selections());
    EXPECT_EQ(mtp.rows_evaluated(), prompt.size() - 1) << "every position whose next token is known";
}

// The shared reference files that carry a NextN block (deepseek2 Q8_0, glm-dsa F16 and Q8_0: each a trunk
// llama.cpp's outputs check), in both llama.cpp builds' numerics: drafts from their blocks change nothing.
TEST(MtpGreedy, SharedFilesWithABlockGiveTheSameTokensWithItsDrafts) {
    REQUIRE_ORACLE();
    int checked = 0;
    for (const auto& e : std::filesystem::directory_iterator(test::oracle_dir() + "/models")) {
        if (e.path().extension() != ".gguf") continue;
        const GgufModel file = open_gguf_model(e.path().string());
        std::unique_ptr<Model> m;
        try {
            m = load_model(file, {.experts = {}, .mtp = true});
        } catch (const std::exception&) { continue; }  // architectures the engine does not load (test_speculative lists them)
        if (!m->mtp) continue;
        const int V = static_cast<int>(m->hp.n_vocab);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 19; ++i) prompt.push_back((11 + 97 * i) % V);
        for (kernels::Flavor flavor : {kernels::Flavor::Avx512, kernels::Flavor::Avx2}) {
            const RunnerOptions ro{.n_ctx = 64, .n_threads = 2, .n_batch = 8, .flavor = flavor};
            const Decoded plain = decode_plain(*m, ro, prompt, 12);
            const Drafted got = decode_mtp(*m, ro, prompt, 12, 3);
            expect_same(plain, got.d, e.path().filename().string() + (flavor == kernels::Flavor::Avx2 ? " (AVX2 numerics)" : ""));
        }
        ++checked;
    }
    std::printf("[ mtp      ] %d shared files with a NextN block drafted from it\n", checked);
    EXPECT_GE(checked, 3);
}

// The block's rows for a prompt evaluated in one go (batched catch-up) and token by token (one row a step)
// give the same first draft, its logits within the batch-versus-row rounding.
TEST(MtpDraft, CatchingUpInBatchesMatchesRowByRow) {
    for (const std::string arch : {"glm4moe", "deepseek4"}) {
        SCOPED_TRACE(arch);
        test::TempDir dir;
        const GgufModel file = open_gguf_model(make_mtp_model(dir, arch));
        const auto m = load_model(file, {.experts = {}, .mtp = true});
        std::vector<int32_t> prompt;
        for (int i = 0; i < 20; ++i) prompt.push_back((3 + 11 * i) % static_cast<int>(m->hp.n_vocab));
        const RunnerOptions ro{.n_ctx = 64, .n_threads = 2, .n_batch = 8};
        auto first_draft = [&](bool one_by_one, std::vector<float>& logits) {
            Runner r(*m, ro);
            MtpDraft mtp(*m, ro);
            r.set_hidden_sink(mtp.hidden_sink());
            if (one_by_one)
                for (int32_t t : prompt) r.eval(std::span<const int32_t>(&t, 1));
            else r.eval(prompt);
            const int32_t pending = 5;
            const std::vector<int32_t> d = mtp.draft(0, pending, 1, r.n_past());
            logits.assign(mtp.logits(), mtp.logits() + m->hp.n_vocab);
            EXPECT_EQ(mtp.rows_evaluated(), prompt.size()) << "one block row per trunk position";
            return d;
        };
        std::vector<float> a, b;
        const auto da = first_draft(false, a), db = first_draft(true, b);
        ASSERT_EQ(da.size(), 1u);
        float scale = 0, diff = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            scale = std::max(scale, std::fabs(a[i]));
            diff = std::max(diff, std::fabs(a[i] - b[i]));
        }
        EXPECT_LT(diff, 1e-3f * scale);
        EXPECT_EQ(da, db);
    }
}

// A held block evaluates nothing; released, its next draft evaluates the rows it missed in one batch (the rows
// evaluated are then the same as a block never held), and rows past the hold's backlog are skipped.
TEST(MtpDraft, AHeldBlockCatchesUpInOneBatch) {
    test::TempDir dir;
    const GgufModel file = open_gguf_model(make_mtp_model(dir, "glm4moe"));
    const auto m = load_model(file, {.experts = {}, .mtp = true});
    const int V = static_cast<int>(m->hp.n_vocab);
    const RunnerOptions ro{.n_ctx = 160, .n_threads = 2, .n_batch = 8};
    Runner r(*m, ro);
    MtpDraft live(*m, ro), held(*m, ro);
    auto to_live = live.hidden_sink(), to_held = held.hidden_sink();
    r.set_hidden_sink([&](const HiddenRows& h) {
        to_live(h);
        to_held(h);
    });
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back((5 + 29 * i) % V);
    r.eval(prompt);
    auto decode = [&](int n) {
        for (int i = 0; i < n; ++i) {
            const int32_t t = argmax({r.logits(), static_cast<size_t>(V)});
            r.eval(std::span<const int32_t>(&t, 1));
        }
        return argmax({r.logits(), static_cast<size_t>(V)});
    };
    held.hold(0, true);
    EXPECT_TRUE(held.held(0));
    int32_t pending = decode(24);
    EXPECT_EQ(held.rows_evaluated(), live.rows_evaluated() - 24) << "held: no rows for the 24 decoded tokens";
    EXPECT_TRUE(held.draft(0, pending, 2, r.n_past()).empty());
    held.hold(0, false);
    const std::vector<int32_t> a = live.draft(0, pending, 2, r.n_past()), b = held.draft(0, pending, 2, r.n_past());
    ASSERT_EQ(a.size(), 2u);
    EXPECT_EQ(a, b) << "the caught-up block drafts what the live one does";
    EXPECT_EQ(held.rows_evaluated(), live.rows_evaluated());
    // A hold longer than its backlog (64 rows): the 16 oldest rows are skipped, the rest take 8 passes of 8.
    held.hold(0, true);
    pending = decode(80);
    held.hold(0, false);
    const uint64_t passes = held.passes();
    EXPECT_EQ(live.draft(0, pending, 2, r.n_past()).size(), 2u);
    EXPECT_EQ(held.draft(0, pending, 2, r.n_past()).size(), 2u);
    EXPECT_EQ(held.rows_evaluated(), live.rows_evaluated() - 16);
    EXPECT_EQ(held.passes() - passes, 8u + 2u) << "the backlog in batches of n_batch, then the draft's two rows";
}

// With --draft mtp, a block whose drafts never pay (random weights: none is kept) is held most of the time, so
// it costs a fraction of a layer per token; the tokens are the same as without drafts.
TEST(MtpDrafter, ABlockWhoseDraftsNeverPayIsHeld) {
    test::TempDir dir;
    const GgufModel file = open_gguf_model(make_mtp_model(dir, "glm4moe"));
    const auto m = load_model(file, {.experts = {}, .mtp = true});
    const int V = static_cast<int>(m->hp.n_vocab);
    const RunnerOptions ro{.n_ctx = 512, .n_threads = 2, .n_batch = 32};
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back((3 + 31 * i) % V);
    const int n = 300;
    const Decoded plain = decode_plain(*m, ro, prompt, n);
    Runner r(*m, ro);
    MtpDraft mtp(*m, ro);
    r.set_hidden_sink(mtp.hidden_sink());
    Drafter drafter(DraftMode::Mtp, 4, step_cost_of(model_facts(file), false));
    drafter.use_mtp(&mtp, 0);
    int held_steps = 0;
    const Decoded got = test::decode_steps(r, prompt, n, [&](Sampler& s, std::vector<int32_t>& history, int room, const EmitToken& emit) {
        const std::vector<int32_t> drafts = drafter.propose(history, room, r.n_past());
        held_steps += mtp.held(0) ? 1 : 0;
        return drafter.step(r, s, history, drafts, emit);
    });
    expect_same(plain, got, "mtp drafts, held while they do not pay");
    EXPECT_GT(held_steps, n / 2);
    // Outside the holds a pass per token; each hold's backlog (at most 64 rows) in passes of n_batch.
    const uint64_t rows = mtp.rows_evaluated() - prompt.size(), passes = mtp.passes() - 1;  // the prompt took one pass
    EXPECT_LT(rows, static_cast<uint64_t>(n)) << "rows of the block for " << n << " tokens";
    EXPECT_LT(passes, static_cast<uint64_t>(n / 2)) << "passes of the block for " << n << " tokens";
    std::printf("[ mtp ] %d of %d steps held; the block evaluated %llu rows in %llu passes for %d tokens; %llu drafts verified\n", held_steps, n,
                static_cast<unsigned long long>(rows), static_cast<unsigned long long>(passes), n,
                static_cast<unsigned long long>(drafter.stats().drafted));
}

// After steps whose drafts were kept, cut short and rejected, and a cut back to a shorter prefix that goes on with
// other tokens, the block's rows are those of the final context: its
// next draft's logits are what a block that saw that context token by token gives (within rounding).
// deepseek4's block keeps its window as state: its cuts go through snapshots and the trunk's rows it holds.
void block_rows_follow_the_trunk(const std::string& arch) {
    SCOPED_TRACE(arch);
    test::TempDir dir;
    const GgufModel file = open_gguf_model(make_mtp_model(dir, arch));
    const auto m = load_model(file, {.experts = {}, .mtp = true});
    const int V = static_cast<int>(m->hp.n_vocab);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back((5 + 29 * i) % V);
    const RunnerOptions ro{.n_ctx = 96, .n_threads = 2, .n_batch = 8};
    const int n = 30;
    const Decoded plain = decode_plain(*m, ro, prompt, n);
    Runner r(*m, ro);
    MtpDraft mtp(*m, ro);
    r.set_hidden_sink(mtp.hidden_sink());
    Sampler s({.temperature = 0.f});
    r.eval(prompt);
    std::vector<int32_t> history = prompt;
    int made = 0, kept = 0, step = 0;
    auto emit = [&](int32_t, std::span<const float>) { return ++made < n - 4; };
    history.push_back(plain.tokens[0]);
    emit(0, {});
    bool more = true;
    while (more) {
        // The block drafts (its rows move on), but what is verified is the model's own continuation, wrong at
        // a varying place: steps keep all, some or none of it.
        mtp.draft(0, history.back(), 2, r.n_past());
        const size_t done = history.size() - prompt.size();
        std::vector<int32_t> drafts(plain.tokens.begin() + static_cast<long>(done),
                                    plain.tokens.begin() + static_cast<long>(std::min(plain.tokens.size(), done + 3)));
        if (step % 3 != 0 && !drafts.empty()) drafts[static_cast<size_t>(step) % drafts.size()] = (drafts.back() + 1) % V;
        ++step;
        const StepOutcome o = speculative_step(r, s, history, drafts, emit);
        kept += o.accepted;
        more = !o.stopped;
    }
    ASSERT_GT(kept, 0);
    ASSERT_LT(kept, made);
    // Then the context is cut back into the last step's rows and goes on with other tokens. (A cut further back,
    // past the trunk's hidden rows the block keeps, leaves the block's row before the cut as it was: one stale
    // row of context for the drafts, see follow_trunk.)
    const int cut = r.truncate(r.n_past() - 1);
    history.resize(static_cast<size_t>(cut));
    const std::vector<int32_t> other = {3, 1, 4, 1};
    history.insert(history.end(), other.begin(), other.end());
    r.eval(other);
    const int past = r.n_past();
    const int32_t pending = 9;
    std::vector<float> live, fresh;
    mtp.draft(0, pending, 1, past);
    live.assign(mtp.logits(), mtp.logits() + V);

    Runner r2(*m, ro);
    MtpDraft mtp2(*m, ro);
    r2.set_hidden_sink(mtp2.hidden_sink());
    for (int i = 0; i < past; ++i) r2.eval(std::span<const int32_t>(&history[static_cast<size_t>(i)], 1));
    mtp2.draft(0, pending, 1, past);
    fresh.assign(mtp2.logits(), mtp2.logits() + V);
    float scale = 0, diff = 0;
    for (int i = 0; i < V; ++i) {
        scale = std::max(scale, std::fabs(fresh[static_cast<size_t>(i)]));
        diff = std::max(diff, std::fabs(fresh[static_cast<size_t>(i)] - live[static_cast<size_t>(i)]));
    }
    EXPECT_LT(diff, 1e-3f * scale) << "after " << step << " steps, " << kept << " drafts kept";
}

TEST(MtpDraft, BlockRowsFollowTheTrunkThroughKeptAndRejectedDrafts) {
    block_rows_follow_the_trunk("deepseek2");
    block_rows_follow_the_trunk("deepseek4");
}

// llama.cpp's deepseek4 converter leaves the MTP block out of the model file (keeping the per-layer lists whole)
// and writes it to mtp-<name>.gguf with its own output hyper-connection head and copies of the embeddings and
// head: the model loads without it, the block loads from that file (its head its own, the embeddings the
// trunk's), drafts from it change no token, and a file of another model is refused naming both values.
TEST(MtpLoad, ABlockInAFileOfItsOwnAsLlamaCppsConverterWritesIt) {
    test::TempDir dir;
    const std::string trunk_path = dir / "v4.gguf", block_path = dir / "mtp-v4.gguf";
    auto mk = [&](const std::string& embd, const std::string& name, const std::string& side) {
        return make_mtp_model(dir, "deepseek4", {"--nextn-file", side}, embd, name);
    };
    ASSERT_EQ(mk("128", "v4", block_path), trunk_path);
    const GgufModel trunk_file = open_gguf_model(trunk_path), block_file = open_gguf_model(block_path);
    EXPECT_EQ(trunk_file.meta().get_int("deepseek4.block_count"), 3);
    EXPECT_FALSE(trunk_file.meta().find("deepseek4.nextn_predict_layers"));
    EXPECT_EQ(trunk_file.meta().find("deepseek4.attention.compress_ratios")->count, 4u) << "the list keeps the block's entry";
    EXPECT_FALSE(load_model(trunk_file, {.experts = {}, .mtp = true})->mtp) << "no block in the model file, none named";
    const ModelFacts facts = read_model_facts(trunk_path);  // check and plan find and count it
    EXPECT_EQ(facts.n_layer_nextn, 0u);
    EXPECT_EQ(facts.nextn_file, block_path);
    EXPECT_EQ(facts.nextn_file_bytes, model_facts(block_file).nextn_bytes);
    EXPECT_GT(facts.nextn_file_bytes, 0u);
    const auto m = load_model(trunk_file, {.experts = {}, .mtp = true, .mtp_file = &block_file});
    ASSERT_TRUE(m->mtp);
    const Model& b = *m->mtp;
    EXPECT_EQ(m->layers.size(), 3u);
    EXPECT_EQ(b.layers.size(), 1u);
    EXPECT_EQ(b.layers[0].compress_ratio, 0u);
    EXPECT_EQ(b.tok_embd.data, m->tok_embd.data) << "the trunk's embeddings, not the file's copy";
    EXPECT_EQ(b.output.data, m->output.data);
    ASSERT_TRUE(b.output_hc.fn.present());
    EXPECT_NE(b.output_hc.fn.data, m->output_hc.fn.data) << "the block's own output head mixer";
    EXPECT_GT(b.experts->bytes_in_ram(), 0u);

    const int V = static_cast<int>(m->hp.n_vocab);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 21; ++i) prompt.push_back((5 + 41 * i) % V);
    const RunnerOptions ro{.n_ctx = 96, .n_threads = 2, .n_batch = 8};
    const Decoded plain = decode_plain(*m, ro, prompt, 12);
    const Drafted got = decode_mtp(*m, ro, prompt, 12, 3);
    expect_same(plain, got.d, "drafts from the block's own file");
    EXPECT_GT(got.drafted, 0);
    EXPECT_EQ(got.redone, 0u);

    const std::string other = dir / "v4-64.gguf", other_block = dir / "mtp-v4-64.gguf";
    ASSERT_EQ(mk("64", "v4-64", other_block), other);
    const GgufModel wrong = open_gguf_model(other_block);
    try {
        load_model(trunk_file, {.experts = {}, .mtp = true, .mtp_file = &wrong});
        ADD_FAILURE() << "another model's block loaded";
    } catch (const ModelError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("embedding_length 64"), std::string::npos) << what;
        EXPECT_NE(what.find("128"), std::string::npos) << what;
    }
    // found beside the model by llama.cpp's name, by the CLI
    auto [rc, out] = test::run_moestream("run -m " + trunk_path + " -p hello -n 8 --draft mtp --json", false);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(nlohmann::json::parse(out)["draft"]["mode"], "mtp") << out;
}

TEST(MtpCli, FilesWithoutABlockOrWhoseBlockIsNotRunAreRefusedInOneLine) {
    test::TempDir dir;
    const std::string none = dir / "none.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel", "--vocab-builtin", "--arch", "glm4moe", "--layers", "2", "--embd", "64", "--heads", "4", "--experts", "4",
                             "--experts-used", "2", "--ffn", "32", "--out", none}),
              0);
    auto [rc, out] = test::run_moestream("run -m " + none + " -p hi -n 4 --draft mtp");
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("has no NextN/MTP block"), std::string::npos) << out;
    const std::string mm2 = dir / "mm2.gguf";
    ASSERT_EQ(
        cli::dispatch({"mkmodel", "--vocab-builtin", "--arch", "minimax-m2", "--layers", "2",       "--embd", "64",    "--heads", "4", "--experts",
                       "4",       "--experts-used",  "2",      "--ffn",      "32",       "--nextn", "1",      "--out", mm2}),
        0);
    std::tie(rc, out) = test::run_moestream("run -m " + mm2 + " -p hi -n 4 --draft mtp");
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("minimax-m2's are not run as drafts"), std::string::npos) << out;
    // A block that is run: the run reports its drafts.
    const std::string glm = make_mtp_model(dir, "glm4moe");
    std::tie(rc, out) = test::run_moestream("run -m " + glm + " -p 'hello there' -n 24 --draft mtp --json", false);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["draft"]["mode"], "mtp");
    EXPECT_TRUE(j["tokens"].size() == 24u || j["stopped_eog"] == true) << out;
}

}  // namespace
}  // namespace moe
