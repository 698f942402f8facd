// `moestream repack`: write (or check) the expert-contiguous store beside a GGUF, so that a streamed expert
// is one read instead of three (engine/runtime/expert_store.h, docs/streaming.md).
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/model/loader.h"
#include "engine/runtime/expert_store.h"
#include "tune/check.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace moe::cli {

int cmd_repack(const std::vector<std::string>& args) {
    std::string model_path, out;
    bool verify = false, force = false, as_json = false;
    po::options_description opts("moestream repack options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path)->required(), "GGUF model (its first split)")(
        "out", po::value(&out), "store to write (default: MODEL.experts, where serve/run/bench look for it)")(
        "verify", po::bool_switch(&verify), "check an existing store against the GGUF and every record's checksum; write nothing")(
        "force", po::bool_switch(&force), "rewrite even when a valid store is already there")("json", po::bool_switch(&as_json),
                                                                                              "machine-readable report");
    po::positional_options_description pos;
    pos.add("model", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    if (vm.count("help")) {
        std::cout << "usage: moestream repack MODEL.gguf [--out FILE] [--verify] [--force] [--json]\n" << opts;
        return 0;
    }
    po::notify(vm);
    if (out.empty()) out = ExpertStore::path_for(model_path);

    const GgufModel file = open_gguf_model(model_path);
    const auto model = load_model_layout(file);
    const std::vector<ExpertLayer> layers = expert_layers(*model);
    try {
        if (verify) {
            const ExpertStore store(out, file, layers);
            const VerifyReport v = verify_expert_store(store);
            json j = {{"store", out},     {"model", model_path},  {"records", v.records},
                      {"bytes", v.bytes}, {"seconds", v.seconds}, {"bad_records", json::array()}};
            for (const auto& [l, e] : v.bad) j["bad_records"].push_back({{"layer", l}, {"expert", e}});
            if (as_json) {
                std::cout << j.dump(2) << "\n";
            } else {
                std::printf("store      %s\nrecords    %llu checked (%s) in %.1f s, %.2f GB/s\n", out.c_str(),
                            static_cast<unsigned long long>(v.records), human_bytes(static_cast<double>(v.bytes)).c_str(), v.seconds,
                            v.seconds > 0 ? static_cast<double>(v.bytes) / v.seconds / 1e9 : 0.0);
                for (size_t i = 0; i < v.bad.size() && i < 20; ++i)
                    std::printf("BAD        layer %u expert %u: checksum mismatch\n", v.bad[i].first, v.bad[i].second);
                std::printf("result     %s\n", v.bad.empty() ? "OK"
                                                             : (std::to_string(v.bad.size()) + " bad records: the engine reads them from the GGUF; "
                                                                                               "moestream repack --force rewrites the store")
                                                                   .c_str());
            }
            return v.bad.empty() ? 0 : 1;
        }
        const bool tty = ::isatty(STDERR_FILENO) && !as_json;
        auto last = std::chrono::steady_clock::now();
        const RepackReport r = write_expert_store(file, layers, model->hp.moe.n_expert, out, force, [&](uint64_t done, uint64_t total) {
            const auto now = std::chrono::steady_clock::now();
            if (!tty || now - last < std::chrono::seconds(1)) return;
            last = now;
            std::fprintf(stderr, "\rrepack: %5.1f%% of %s", 100.0 * static_cast<double>(done) / static_cast<double>(total),
                         human_bytes(static_cast<double>(total)).c_str());
        });
        if (tty && !r.up_to_date) std::fprintf(stderr, "\r%40s\r", "");
        json j = {{"store", r.path},  {"model", model_path},  {"up_to_date", r.up_to_date}, {"records", r.records},
                  {"bytes", r.bytes}, {"seconds", r.seconds}, {"direct_io", r.direct}};
        if (as_json) {
            std::cout << j.dump(2) << "\n";
        } else if (r.up_to_date) {
            std::printf("store      %s\nresult     up to date (%llu records, %s, made from this GGUF); nothing written (--force rewrites)\n",
                        r.path.c_str(), static_cast<unsigned long long>(r.records), human_bytes(static_cast<double>(r.bytes)).c_str());
        } else {
            std::printf(
                "store      %s\nrecords    %llu (one per layer and expert: gate, up, down together, 4 KiB-aligned, XXH3 each)\n"
                "written    %s in %.1f s, %.2f GB/s (%s)\n",
                r.path.c_str(), static_cast<unsigned long long>(r.records), human_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds,
                r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0,
                r.direct ? "O_DIRECT" : "buffered, dropped from the page cache behind the writes");
        }
        return 0;
    } catch (const ExpertStoreError& e) { throw CliError(e.what(), verify ? 1 : 2); }
}

}  // namespace moe::cli
