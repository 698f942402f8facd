// Sliding-window layers kept as a ring of window + batch rows (llama.cpp's SWA cache) instead of every position:
// past the ring's wrap they give what keeping every position gives (the same tokens; logits to float rounding,
// since the ring's row order is llama.cpp's cell order); cuts within the ring's slack keep the window, cuts
// further back go to a checkpoint's window (or 0); drafts rolled back on a wrapped ring change no bit; a prompt
// cache record restores a wrapped ring's window; and the ring takes what ModelFacts says it takes.
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/model/cache_shape.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/server/prompt_cache.h"
#include "tests/greedy_decode.h"
#include "tests/http_client.h"
#include "tests/serve_fixture.h"
#include "tests/test_support.h"

namespace moe {
namespace {

constexpr int kWindow = 16, kBatch = 32;  // a ring of GGML_PAD(16 + 32, 256) = 256 rows

class SlidingRing : public ::testing::Test {
protected:
    static Model* make(const std::string& layers) {
        const std::string out = *dir_ / ("oss" + layers + ".gguf");
        EXPECT_EQ(cli::dispatch({"mkmodel",        "--vocab-builtin",
                                 "--arch",         "gpt-oss",
                                 "--layers",       layers,
                                 "--embd",         "64",
                                 "--heads",        "4",
                                 "--kv-heads",     "2",
                                 "--head-dim",     "32",
                                 "--experts",      "4",
                                 "--experts-used", "2",
                                 "--ffn",          "32",
                                 "--window",       std::to_string(kWindow),
                                 "--seed",         "5",
                                 "--out",          out}),
                  0);
        files_.push_back(new GgufModel(open_gguf_model(out)));
        return load_model(*files_.back()).release();
    }
    static void SetUpTestSuite() {
        dir_ = new test::TempDir;
        model_ = make("2");  // a sliding-window layer, then a full one
        alone_ = make("1");  // the sliding-window layer alone: a token's logits depend on its window only
    }
    static void TearDownTestSuite() {
        delete model_;
        delete alone_;
        for (GgufModel* f : files_) delete f;
        delete dir_;
    }
    static RunnerOptions options(bool swa_full) { return {.n_ctx = 1024, .n_threads = 2, .n_batch = kBatch, .swa_full = swa_full}; }
    static std::vector<int32_t> tokens(int n, int seed) {
        std::vector<int32_t> t;
        uint32_t x = static_cast<uint32_t>(seed);
        for (int i = 0; i < n; ++i) {
            x = x * 1664525u + 1013904223u;
            t.push_back(static_cast<int32_t>((x >> 8) % model_->hp.n_vocab));
        }
        return t;
    }
    static float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
        float d = 0;
        for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
        return d;
    }
    static std::vector<float> logits(const Runner& r) { return {r.logits(), r.logits() + r.n_vocab()}; }
    static inline test::TempDir* dir_ = nullptr;
    static inline std::vector<GgufModel*> files_;
    static inline Model* model_ = nullptr;
    static inline Model* alone_ = nullptr;
};

// The ring's rows are read in row order (llama.cpp's cell order), so a window that crosses the ring's end sums
// its keys in another order than position order; with an fp16 V accumulated in fp16 (as llama.cpp does) that
// moves logits by up to ~2e-2. Every other token gets the bits keeping every position gives.
TEST_F(SlidingRing, PastTheWrapItGivesWhatKeepingEveryPositionGives) {
    Runner ring(*model_, options(false)), full(*model_, options(true));
    ASSERT_TRUE(ring.sequence_cache().has_ring());
    ASSERT_FALSE(full.sequence_cache().has_ring());
    EXPECT_EQ(ring.sequence_cache().ring[0], 256);
    EXPECT_EQ(ring.sequence_cache().ring[1], 0);  // gpt-oss: odd layers attend to everything
    EXPECT_LT(ring.sequence_cache().bytes(), full.sequence_cache().bytes());
    const std::vector<int32_t> prompt = tokens(200, 1);
    const int n = 400;  // to position 600: across the ring's end twice
    {
        const test::Decoded a = test::decode_plain(*alone_, options(false), prompt, n), b = test::decode_plain(*alone_, options(true), prompt, n);
        int exact = 0, crossing = 0;
        float worst = 0;
        for (int i = 0; i < n; ++i) {
            const int pos = 200 + i - 1;  // the token whose logits row i is (the prompt's last for row 0)
            const bool crosses = pos / 256 != (pos - kWindow + 1) / 256 && pos >= 256;
            if (crosses) {
                worst = std::max(worst, max_diff(a.logits[i], b.logits[i]));
                ++crossing;
            } else {
                EXPECT_EQ(a.logits[i], b.logits[i]) << "position " << pos;
                ++exact;
            }
        }
        EXPECT_LT(worst, 5e-2f);
        std::printf(
            "[ ring ] one sliding layer, 600 positions through a 256-row ring: %d tokens bit for bit, %d whose window crosses the ring's "
            "end within %.1e\n",
            exact, crossing, worst);
    }
    // With a full-attention layer after it, those rows' small differences stay in its cache: the same tokens.
    const test::Decoded a = test::decode_plain(*model_, options(false), prompt, 100), b = test::decode_plain(*model_, options(true), prompt, 100);
    EXPECT_EQ(a.tokens, b.tokens);
}

TEST_F(SlidingRing, CutsKeepTheWindowWithinTheSlackAndGoToACheckpointBeyond) {
    // Chunk boundaries stay at multiples of the batch, so a fresh runner's rows are computed alike: exact bits.
    const std::vector<int32_t> t = tokens(400, 2), tail = tokens(20, 3);
    auto fresh = [&](int from) {
        Runner r(*model_, options(false));
        r.eval(std::span(t).first(static_cast<size_t>(from)));
        r.eval(tail);
        return logits(r);
    };
    Runner r(*model_, options(false));
    r.eval(std::span(t).first(96));
    r.checkpoint();
    EXPECT_EQ(r.checkpoint_bytes(), r.sequence_cache().window_bytes());
    EXPECT_EQ(r.checkpoint_bytes(), uint64_t{kWindow - 1} * 2 * 2 * 32 * 2);  // K and V, 2 kv heads x 32, fp16, one ring layer
    r.eval(std::span(t).subspan(96));
    EXPECT_EQ(r.sequence_cache().reach(), 400 - (256 - kWindow));
    // Within the slack: the cut keeps its positions and its window.
    ASSERT_EQ(r.truncate(384), 384);
    r.eval(tail);
    EXPECT_EQ(logits(r), fresh(384));
    // Beyond it: the checkpoint's window (rows the tail and the later tokens overwrote in the ring).
    ASSERT_EQ(r.truncate(128), 96);
    r.eval(std::span(t).subspan(96, 32));
    r.eval(tail);
    EXPECT_EQ(logits(r), fresh(128));
    // Below every checkpoint: from the start.
    r.truncate(128);
    r.eval(std::span(t).subspan(128));
    EXPECT_EQ(r.truncate(64), 0);
    EXPECT_EQ(r.checkpoint_count(), 0u);
    r.eval(std::span(t).first(64));
    r.eval(tail);
    EXPECT_EQ(logits(r), fresh(64));
    // Drafts roll back by at most a batch, which the slack holds; further is a caller's error, not wrong rows.
    const Runner::Checkpoint mark{10, {}, {}};
    r.eval(std::span(t).subspan(84));
    EXPECT_THROW(r.rewind(mark), std::logic_error);
}

TEST_F(SlidingRing, DraftsRolledBackOnAWrappedRingChangeNoBit) {
    const std::vector<int32_t> prompt = tokens(250, 4);
    const int n = 30;  // positions 250..280: the window crosses the ring's end
    const test::Decoded plain = test::decode_plain(*model_, options(false), prompt, n);
    const int V = static_cast<int>(model_->hp.n_vocab);
    auto broken = [&](const std::vector<int32_t>& h) {
        std::vector<int32_t> d(plain.tokens.begin() + static_cast<long>(h.size() - prompt.size()), plain.tokens.end());
        if (d.size() > 2) d[2] = (d[2] + 1) % V;
        d.resize(std::min<size_t>(d.size(), 6));
        return d;
    };
    int kept = 0;
    test::expect_same(plain, test::decode_drafted(*model_, options(false), prompt, n, broken, &kept), "gpt-oss, a wrapped ring");
    EXPECT_GT(kept, 0);
}

TEST_F(SlidingRing, APromptCacheRecordRestoresAWrappedRingsWindow) {
    test::TempDir dir;
    const std::vector<int32_t> t = tokens(400, 5), rest = tokens(10, 6);
    const PromptCacheOptions po{.dir = dir / "pc", .max_bytes = 64ull << 20, .write_bytes_per_s = 0, .min_tokens = 16, .disk_busy = {}};
    Runner a(*model_, options(false));
    std::vector<std::string> log;
    {
        PromptCache pc(po, 7, a.sequence_cache(), [&](const std::string& l) { log.push_back(l); });
        a.eval(t);
        auto p = pc.save(t, a.sequence_cache(), {});
        ASSERT_TRUE(p);
        a.eval(tokens(300, 7));  // decoding goes on over the ring while the record is written
        pc.flush(30);
        ASSERT_TRUE(p->done());
    }
    Runner want(*model_, options(false));
    want.eval(t);
    want.eval(rest);
    Runner b(*model_, options(false));
    PromptCache pc(po, 7, b.sequence_cache(), [&](const std::string& l) { log.push_back(l); });
    std::vector<int32_t> longer = t;
    longer.insert(longer.end(), rest.begin(), rest.end());
    // A record of a sliding-window model restores whole only (the rows below its window are not kept).
    std::vector<int32_t> diverging = longer;
    diverging[390] = (diverging[390] + 1) % static_cast<int32_t>(model_->hp.n_vocab);
    EXPECT_FALSE(pc.best_match(diverging, static_cast<int>(diverging.size()) - 1, false));
    const auto m = pc.best_match(longer, static_cast<int>(longer.size()) - 1, false);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->tokens, 400);
    bool written = false;
    auto snapshots = pc.restore(*m, b.sequence_cache(), written);
    ASSERT_TRUE(snapshots);
    b.adopt_prefix(m->tokens, std::move(*snapshots));
    b.eval(rest);
    EXPECT_EQ(0, std::memcmp(b.logits(), want.logits(), model_->hp.n_vocab * sizeof(float)));
}

// The server on a wrapped ring: the same request again after a long answer goes back further than the ring's
// slack (the answer overwrote the prompt's window), so it resumes from the window checkpoint 4 tokens before
// the prompt's end and gives the same answer; with --swa-full every position is there and only the last token
// is evaluated again.
TEST_F(SlidingRing, TheServerGoesBackThroughWindowCheckpoints) {
    using nlohmann::json;
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":"Hello there"}],"max_tokens":800,"ignore_eos":true,"temperature":0})";
    for (bool full : {false, true}) {
        SCOPED_TRACE(full ? "--swa-full" : "ring");
        std::vector<std::string> args = {"--ctx", "2048"};
        if (full) args.push_back("--swa-full");
        test::Server s(*dir_ / "oss2.gguf", args);
        ASSERT_GT(s.port(), 0) << s.log();
        const json a = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", body).body);
        const json b = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", body).body);
        ASSERT_EQ(a["usage"]["completion_tokens"].get<int>(), 800) << a.dump();  // past the 768-row ring's slack of 752
        const int p = a["usage"]["prompt_tokens"].get<int>();
        EXPECT_EQ(b["timings"]["prompt_reused"].get<int>(), full ? p - 1 : p - 4) << b.dump();
        EXPECT_EQ(b["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"]);
        EXPECT_EQ(s.terminate(), 0) << s.log();
    }
}

TEST_F(SlidingRing, ModelFactsCountTheRingAndItsCheckpointWindows) {
    const ModelFacts f = model_facts(*files_[0]);
    const SequenceCache c = SequenceCache::make(*model_, 4096, {}, kDefaultRingBatch);
    EXPECT_EQ(c.ring[0], 768);  // llama.cpp's SWA cache for n_ubatch 512: GGML_PAD(16 + 512, 256)
    EXPECT_EQ(f.kv_bytes(4096, 0), c.bytes());
    EXPECT_EQ(f.kv_bytes(4096, 8) - f.kv_bytes(4096, 0), 8 * c.window_bytes());
    // The full-attention layer grows with the context, the ring does not.
    EXPECT_EQ(f.kv_bytes(8192, 0) - f.kv_bytes(4096, 0), 4096ull * 2 * 2 * 32 * 2);
    EXPECT_NE(f.cache_layout.find("x 1 layers + 1 sliding-window layers as rings of 768 rows"), std::string::npos) << f.cache_layout;
}

}  // namespace
}  // namespace moe
