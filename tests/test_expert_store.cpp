// The expert-contiguous store (moestream repack): streamed through it, a model gives the same logits with one
// read per expert; a damaged record is read from the GGUF instead and reported; a store made for another
// file, truncated or hostile is refused with the reason; repacking is idempotent and never leaves a partial
// store under the real name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/runtime/expert_store.h"
#include "tests/serve_fixture.h"
#include "tests/budget.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& name, const std::string& seed = "5") {
    const std::string out = dir / name;
    EXPECT_EQ(cli::dispatch({"mkmodel", "--layers",       "3",      "--embd",     "256",   "--heads",
                             "4",       "--kv-heads",     "2",      "--head-dim", "64",    "--experts",
                             "16",      "--experts-used", "4",      "--ffn",      "256",   "--vocab-builtin",
                             "--type",  "q4_k_m",         "--seed", seed,         "--out", out}),
              0);
    return out;
}

// A synthetic model with its store written beside it.
std::string repacked_model(const test::TempDir& dir) {
    const std::string model = make_model(dir, "m.gguf");
    EXPECT_EQ(cli::dispatch({"repack", model}), 0);
    return model;
}

StreamingOptions fifth_of_the_experts(const GgufModel& file) {
    StreamingOptions o;
    o.cache_bytes = model_facts(file).expert_bytes / 5;
    o.read_size = 1 << 20;  // larger than a record: one read per expert from the store
    o.io.queue_depth = 16;
    return o;
}

std::string what_refuses(const std::string& store, const GgufModel& file) {
    auto layout = load_model_layout(file);
    try {
        ExpertStore s(store, file, expert_layers(*layout));
    } catch (const ExpertStoreError& e) { return e.what(); }
    return "";
}

const std::vector<int32_t> kPrompt = {5, 77, 200, 31, 31, 9, 120, 64, 3, 250, 17, 99};

TEST(ExpertStore, SameLogitsWithOneReadPerExpert) {
    test::TempDir dir;
    const std::string model = repacked_model(dir);
    ASSERT_TRUE(fs::exists(ExpertStore::path_for(model)));
    GgufModel file = open_gguf_model(model);
    const auto want = test::greedy_logits(*load_model(file), kPrompt, 10);

    std::string note;
    auto m = load_model(file, {.experts = cli::streaming_experts(fifth_of_the_experts(file), "auto", &note)});
    auto& src = dynamic_cast<StreamingExpertSource&>(*m->experts);
    ASSERT_NE(src.store(), nullptr) << note;
    EXPECT_NE(note.find("expert store"), std::string::npos) << note;
    EXPECT_EQ(test::greedy_logits(*m, kPrompt, 10), want);
    const auto st = src.stats();
    EXPECT_GT(st.store_loads, 0u);
    EXPECT_EQ(st.reads_submitted, st.store_loads);  // one read per expert
    EXPECT_EQ(st.store_bad_records, 0u);
    EXPECT_EQ(src.read_files().back(), ExpertStore::path_for(model));

    // The same cache over the GGUF: three reads per expert.
    auto g = load_model(file, {.experts = cli::streaming_experts(fifth_of_the_experts(file), "off")});
    EXPECT_EQ(test::greedy_logits(*g, kPrompt, 10), want);
    const auto gs = g->experts->stats();
    EXPECT_EQ(gs.store_loads, 0u);
    EXPECT_EQ(gs.reads_submitted, 3 * (gs.misses + gs.prefetch_issued));
}

TEST(ExpertStore, DamagedRecordIsReadFromTheGgufAndReported) {
    test::TempDir dir;
    const std::string model = repacked_model(dir);
    GgufModel file = open_gguf_model(model);
    const std::string store_path = ExpertStore::path_for(model);
    {
        auto layout = load_model_layout(file);
        const ExpertStore store(store_path, file, expert_layers(*layout));
        std::fstream f(store_path, std::ios::in | std::ios::out | std::ios::binary);
        for (uint32_t e = 0; e < store.n_expert(); ++e) {  // every record of layer 1: whatever the router picks is damaged
            f.seekp(static_cast<std::streamoff>(store.record_offset(1, e) + store.layer(1).part_offset[1] + 17));
            f.put('\x5a');
        }
    }
    const auto want = test::greedy_logits(*load_model(file), kPrompt, 6);
    std::vector<std::string> warnings;
    StreamingOptions o = fifth_of_the_experts(file);
    o.warn = [&](const std::string& w) { warnings.push_back(w); };
    auto m = load_model(file, {.experts = cli::streaming_experts(o, "auto")});
    EXPECT_EQ(test::greedy_logits(*m, kPrompt, 6), want);
    const auto st = m->experts->stats();
    EXPECT_GT(st.store_bad_records, 0u);
    ASSERT_FALSE(warnings.empty());
    EXPECT_NE(warnings[0].find("of layer 1 fails its checksum"), std::string::npos) << warnings[0];
    EXPECT_EQ(warnings.size(), st.store_bad_records);  // once per record, not once per read

    auto [rc, out] = test::run_moestream("repack " + model + " --verify");
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("BAD        layer 1 expert 0"), std::string::npos) << out;
    EXPECT_NE(out.find("16 bad records"), std::string::npos) << out;
    // --force rewrites it; then it verifies clean.
    EXPECT_EQ(test::run_moestream("repack " + model).first, 0);  // a damaged record does not show in the header: still "up to date"
    EXPECT_EQ(test::run_moestream("repack " + model + " --force").first, 0);
    auto [rc2, out2] = test::run_moestream("repack " + model + " --verify --json");
    EXPECT_EQ(rc2, 0) << out2;
    EXPECT_NE(out2.find("\"bad_records\": []"), std::string::npos) << out2;
}

TEST(ExpertStore, StoreOfAnotherGgufIsRefusedWithTheReason) {
    test::TempDir dir;
    const std::string a = make_model(dir, "a.gguf", "5"), b = make_model(dir, "b.gguf", "6");  // same shapes and types
    ASSERT_EQ(cli::dispatch({"repack", a}), 0);
    fs::copy_file(ExpertStore::path_for(a), ExpertStore::path_for(b));
    GgufModel fb = open_gguf_model(b);
    EXPECT_NE(what_refuses(ExpertStore::path_for(b), fb).find("made from a different GGUF ("), std::string::npos)
        << what_refuses(ExpertStore::path_for(b), fb);
    {  // Same header, one expert weight byte changed in place (an edited or re-downloaded file).
        const std::string c = dir / "c.gguf";
        fs::copy_file(a, c);
        fs::copy_file(ExpertStore::path_for(a), ExpertStore::path_for(c));
        GgufModel fc = open_gguf_model(c);
        const GgufTensorInfo* t = fc.find_tensor("blk.0.ffn_up_exps.weight");
        ASSERT_NE(t, nullptr);
        std::fstream f(c, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(static_cast<std::streamoff>(fc.files[0].data_offset + t->offset + 100));
        const char old = static_cast<char>(f.get());
        f.seekp(static_cast<std::streamoff>(fc.files[0].data_offset + t->offset + 100));
        f.put(static_cast<char>(old ^ 0x40));
        f.close();
        EXPECT_NE(what_refuses(ExpertStore::path_for(c), fc).find("made from a different GGUF (expert tensor bytes differ"), std::string::npos)
            << what_refuses(ExpertStore::path_for(c), fc);
    }
    // The engine falls back to the GGUF and says why; an explicitly named store is an error.
    std::string note;
    auto m = load_model(fb, {.experts = cli::streaming_experts(fifth_of_the_experts(fb), "auto", &note)});
    EXPECT_EQ(dynamic_cast<StreamingExpertSource&>(*m->experts).store(), nullptr);
    EXPECT_NE(note.find("expert store not used, reading the GGUF"), std::string::npos) << note;
    EXPECT_EQ(test::greedy_logits(*m, kPrompt, 2), test::greedy_logits(*load_model(fb), kPrompt, 2));
    auto [rc, out] = test::run_moestream("run -m " + b + " --ram-budget " + test::budget_plus_working(b, 3u << 20, 256) +
                                         " -c 256 --prompt hi -n 2 --expert-store " + ExpertStore::path_for(b));
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("--expert-store: " + ExpertStore::path_for(b) + ": made from a different GGUF"), std::string::npos) << out;
    // repack notices the stale store and writes a new one.
    auto [rc2, out2] = test::run_moestream("repack " + b);
    EXPECT_EQ(rc2, 0) << out2;
    EXPECT_EQ(out2.find("up to date"), std::string::npos) << out2;
    EXPECT_EQ(what_refuses(ExpertStore::path_for(b), fb), "");
}

TEST(ExpertStore, TruncatedOrHostileStoresAreRefused) {
    test::TempDir dir;
    const std::string model = repacked_model(dir);
    GgufModel file = open_gguf_model(model);
    const std::string good = ExpertStore::path_for(model);
    const std::string bad = dir / "bad.experts";
    auto damaged = [&](const std::function<void(std::fstream&)>& edit) {
        fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
        std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
        edit(f);
        f.close();
        return what_refuses(bad, file);
    };
    auto truncated = [&](uint64_t size) {
        fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
        fs::resize_file(bad, size);
        return what_refuses(bad, file);
    };
    EXPECT_NE(truncated(100).find("truncated (100 bytes"), std::string::npos);
    EXPECT_NE(truncated(fs::file_size(good) / 2).find("its header says " + std::to_string(fs::file_size(good))), std::string::npos);
    EXPECT_NE(damaged([](std::fstream& f) { f.put('X'); }).find("not a moestream expert store"), std::string::npos);
    EXPECT_NE(damaged([](std::fstream& f) {
                  f.seekp(8);
                  f.put('\x07');
              }).find("store version 7"),
              std::string::npos);
    // A hostile layer count is caught before it sizes anything.
    EXPECT_NE(damaged([](std::fstream& f) {
                  f.seekp(40);
                  f.write("\xff\xff\xff\x7f", 4);
              }).find("made for a model of 2147483647 layers"),
              std::string::npos);
    EXPECT_NE(damaged([](std::fstream& f) {
                  f.seekp(12);
                  f.write("\x00\x00\x00\x40", 4);
              }).find("header size"),
              std::string::npos);
    // Any other header byte: the header checksum.
    EXPECT_NE(damaged([](std::fstream& f) {
                  f.seekp(70);
                  f.put('\x01');
              }).find("header checksum mismatch"),
              std::string::npos);
    EXPECT_EQ(what_refuses(dir / "absent.experts", file).find(dir / "absent.experts"), 0u);
}

TEST(ExpertStore, RepackIsIdempotentAndAtomic) {
    test::TempDir dir;
    const std::string model = make_model(dir, "m.gguf");
    const std::string store = ExpertStore::path_for(model);
    auto [rc, out] = test::run_moestream("repack " + model);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("records    48"), std::string::npos) << out;
    const auto written = fs::last_write_time(store);
    auto [rc2, out2] = test::run_moestream("repack " + model);
    EXPECT_EQ(rc2, 0);
    EXPECT_NE(out2.find("up to date"), std::string::npos) << out2;
    EXPECT_EQ(fs::last_write_time(store), written);
    for (const auto& e : fs::directory_iterator(dir.path)) EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path();
    // Nowhere to write: the error names the file, nothing is left behind.
    auto [rc3, out3] = test::run_moestream("repack " + model + " --out " + dir / "missing/dir/x.experts");
    EXPECT_EQ(rc3, 2);
    EXPECT_NE(out3.find("missing/dir/x.experts.partial: cannot create"), std::string::npos) << out3;
    // tmpfs before Linux 6.6 refuses O_DIRECT: the store is then written through the page cache, just as valid.
    if (fs::is_directory("/dev/shm")) {
        const std::string shm = "/dev/shm/moestream-test-" + std::to_string(::getpid()) + ".experts";
        auto [rc4, out4] = test::run_moestream("repack " + model + " --out " + shm + " --json");
        EXPECT_EQ(rc4, 0) << out4;
        GgufModel file = open_gguf_model(model);
        EXPECT_EQ(what_refuses(shm, file), "");
        fs::remove(shm);
    }
}

TEST(ExpertStore, RunPicksTheStoreUpAndSaysSo) {
    test::TempDir dir;
    const std::string model = make_model(dir, "m.gguf");
    const std::string run = "run -m " + model + " --ram-budget " + test::budget_plus_working(model, 3u << 20, 256) +
                            " -c 256 --prompt hello -n 8 --temp 0";
    auto [rc0, before] = test::run_moestream(run);
    ASSERT_EQ(rc0, 0) << before;
    EXPECT_NE(before.find("no expert store (moestream repack writes one"), std::string::npos) << before;
    EXPECT_NE(before.find("experts streamed"), std::string::npos) << before;
    const std::string text_before = test::run_moestream(run, false).second;
    ASSERT_EQ(cli::dispatch({"repack", model}), 0);
    auto [rc1, after] = test::run_moestream(run);
    ASSERT_EQ(rc1, 0) << after;
    EXPECT_NE(after.find("expert store " + ExpertStore::path_for(model)), std::string::npos) << after;
    EXPECT_EQ(test::run_moestream(run, false).second, text_before);
    EXPECT_NE(test::run_moestream(run + " --expert-store off").second.find("expert store off"), std::string::npos);
}

// serve streams through the store and says so in /metrics: store loads counted, one request per expert, no bad
// records; answers the same text as without the store.
TEST(ExpertStore, ServeCountsStoreLoadsInMetrics) {
    test::TempDir dir;
    const std::string model = repacked_model(dir);
    auto value = [](const std::string& metrics, const std::string& name) {
        const size_t p = metrics.find("\n" + name + " ");
        return p == std::string::npos ? -1.0 : std::stod(metrics.substr(p + name.size() + 2));
    };
    const std::string body = R"({"model":"m","prompt":"hello there","max_tokens":8,"temperature":0})";
    std::string texts[2];
    for (int with_store = 0; with_store < 2; ++with_store) {
        test::Server s(model, {"--ram-budget", test::budget_plus_working(model, 3u << 20, 256, 1, test::kServeThreads), "--ctx", "256",
                               "--expert-store", with_store ? "auto" : "off"});
        ASSERT_NE(s.port(), 0);
        auto r = test::request(s.port(), "POST", "/v1/completions", body);
        ASSERT_EQ(r.status, 200) << r.body;
        texts[with_store] = nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>();
        const std::string metrics = test::request(s.port(), "GET", "/metrics").body;
        const double loads = value(metrics, "moestream_expert_store_loads_total");
        const double requests = value(metrics, "moestream_expert_read_requests_total");
        EXPECT_EQ(value(metrics, "moestream_expert_store_bad_records_total"), 0.0) << metrics;
        if (with_store) {
            EXPECT_GT(loads, 0.0) << metrics;
            EXPECT_EQ(requests, loads) << metrics;  // one request per expert (records are smaller than --read-size)
        } else {
            EXPECT_EQ(loads, 0.0) << metrics;
            EXPECT_GT(requests, 0.0) << metrics;
        }
    }
    EXPECT_EQ(texts[1], texts[0]);
}

}  // namespace
}  // namespace moe
