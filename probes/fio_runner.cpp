// Drives fio for one random-read measurement and parses its JSON report.
#include <sys/wait.h>

#include <unistd.h>

#include <array>
#include <fstream>
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

// Runs a fio command line; nullopt (with `why`) when fio is missing, throws when it runs and fails.
std::optional<BandwidthResult> run_fio_command(const std::string& fio, const std::string& cmd, std::string& why) {
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
    return parse_fio_json(out);
}
}  // namespace

std::optional<BandwidthResult> run_fio(const std::string& fio, const std::string& file, uint64_t size, bool readonly, uint64_t block, int qd,
                                       double seconds, std::string& why) {
    std::string cmd = shell_quote(fio) + " --name=moestream-probe --filename=" + shell_quote(file) + " --rw=randread --bs=" + std::to_string(block) +
                      " --direct=1 --ioengine=io_uring --iodepth=" + std::to_string(qd) +
                      " --runtime=" + std::to_string(std::max(1, static_cast<int>(seconds))) + " --time_based --size=" + std::to_string(size) +
                      " --output-format=json" + (readonly ? " --readonly" : "") + " 2>&1";
    auto r = run_fio_command(fio, cmd, why);
    if (!r) return r;
    r->block_size = block;
    r->queue_depth = qd;
    return r;
}

void write_fio_iolog(const std::string& path, const std::vector<std::string>& files, const std::vector<ReadRecord>& reads) {
    std::ofstream out(path);
    if (!out) throw StorageProbeError("cannot write the fio replay log " + path);
    out << "fio version 2 iolog\n";
    for (const auto& f : files) out << f << " add\n";
    for (const auto& f : files) out << f << " open\n";
    for (const ReadRecord& r : reads) {
        if (r.file >= files.size()) throw StorageProbeError("replay read names file index " + std::to_string(r.file));
        out << files[r.file] << " read " << r.offset << " " << r.len << "\n";
    }
    for (const auto& f : files) out << f << " close\n";
    if (!out.flush()) throw StorageProbeError("cannot write the fio replay log " + path);
}

std::optional<BandwidthResult> run_fio_replay(const std::string& fio, const std::vector<std::string>& files, const std::vector<ReadRecord>& reads,
                                              int qd, std::string& why) {
    if (reads.empty()) {
        why = "no reads to replay";
        return std::nullopt;
    }
    char path[] = "/tmp/moestream-replay-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) throw StorageProbeError("cannot create a temporary file for the fio replay log");
    ::close(fd);
    std::optional<BandwidthResult> r;
    try {
        write_fio_iolog(path, files, reads);
        // As fast as the device allows (no think time), the engine's depth, O_DIRECT through io_uring.
        const std::string cmd = shell_quote(fio) + " --name=moestream-replay --read_iolog=" + shell_quote(path) +
                                " --ioengine=io_uring --direct=1 --iodepth=" + std::to_string(qd) +
                                " --replay_no_stall=1 --readonly --output-format=json 2>&1";
        r = run_fio_command(fio, cmd, why);
    } catch (...) {
        ::unlink(path);
        throw;
    }
    ::unlink(path);
    if (r) r->queue_depth = qd;
    return r;
}

}  // namespace moe
