// Drives fio for one random-read measurement and parses its JSON report.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "probes/storage_probe.h"

namespace moe {

BandwidthResult parse_fio_json(const std::string& text) {
    // fio prints notes before the JSON on some versions: start at the first '{'.
    auto brace = text.find('{');
    if (brace == std::string::npos) throw StorageProbeError("fio output has no JSON object");
    nlohmann::json j = nlohmann::json::parse(text.substr(brace), nullptr, false);
    if (j.is_discarded()) throw StorageProbeError("fio output is not valid JSON");
    if (!j.contains("jobs") || !j["jobs"].is_array() || j["jobs"].empty()) throw StorageProbeError("fio JSON has no jobs[]");
    const auto& job = j["jobs"][0];
    if (job.value("error", 0) != 0) throw StorageProbeError("fio job failed with error " + std::to_string(job.value("error", 0)));
    if (!job.contains("read") || !job["read"].is_object()) throw StorageProbeError("fio JSON has no jobs[0].read");
    const auto& rd = job["read"];
    BandwidthResult r;
    r.tool = "fio";
    if (!rd.contains("bw_bytes") || !rd["bw_bytes"].is_number()) throw StorageProbeError("fio JSON has no read.bw_bytes");
    r.bytes_per_s = rd["bw_bytes"].get<double>();
    r.iops = rd.value("iops", 0.0);
    if (rd.contains("clat_ns") && rd["clat_ns"].contains("percentile")) {
        const auto& p = rd["clat_ns"]["percentile"];
        r.clat_p50_us = p.value("50.000000", 0.0) / 1000.0;
        r.clat_p99_us = p.value("99.000000", 0.0) / 1000.0;
    }
    r.seconds = rd.value("runtime", 0.0) / 1000.0;
    return r;
}

namespace {
std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}
}  // namespace

// Returns nullopt (with `why`) when fio is missing; throws when it runs and fails.
std::optional<BandwidthResult> run_fio(const std::string& fio, const std::string& file, uint64_t size, bool readonly,
                                       uint64_t block, int qd, double seconds, std::string& why) {
    std::string cmd = shell_quote(fio) + " --name=moestream-probe --filename=" + shell_quote(file) +
                      " --rw=randread --bs=" + std::to_string(block) + " --direct=1 --ioengine=io_uring --iodepth=" +
                      std::to_string(qd) + " --runtime=" + std::to_string(std::max(1, static_cast<int>(seconds))) +
                      " --time_based --size=" + std::to_string(size) + " --output-format=json" +
                      (readonly ? " --readonly" : "") + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) {
        why = "cannot start fio";
        return std::nullopt;
    }
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int status = ::pclose(p);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 127) {
        why = "fio not found (" + fio + "): install it (apt-get install fio); using the built-in io_uring probe only";
        return std::nullopt;
    }
    if (code != 0) {
        std::string first = out.substr(0, out.find('\n'));
        throw StorageProbeError("fio exited with status " + std::to_string(code) + ": " + first);
    }
    BandwidthResult r = parse_fio_json(out);
    r.block_size = block;
    r.queue_depth = qd;
    return r;
}

}  // namespace moe
