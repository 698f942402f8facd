#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "probes/probes.h"
#include "probes/storage_probe.h"

namespace moe {

namespace {

constexpr long kTmpfsMagic = 0x01021994, kRamfsMagic = 0x858458f6;

std::string fs_name(long type) {
    switch (type) {
        case 0xEF53: return "ext2/3/4";
        case 0x58465342: return "xfs";
        case 0x9123683E: return "btrfs";
        case kTmpfsMagic: return "tmpfs";
        case kRamfsMagic: return "ramfs";
        case 0x794c7630: return "overlayfs";
        case 0x2fc12fc1: return "zfs";
        case 0x6969: return "nfs";
        default: {
            char buf[32];
            std::snprintf(buf, sizeof buf, "0x%lx", type);
            return buf;
        }
    }
}

// A scratch file written in full, removed when this goes out of scope.
class ScratchFile {
public:
    ScratchFile(const std::string& dir, uint64_t bytes) : path_(dir + "/.moestream-probe-" + std::to_string(::getpid())) {
        int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) throw StorageProbeError(path_ + ": cannot create scratch file: " + std::strerror(errno));
        std::vector<uint8_t> chunk(8 << 20);
        std::mt19937_64 rng(7);
        for (size_t i = 0; i + 8 <= chunk.size(); i += 8) {
            uint64_t v = rng();
            std::memcpy(&chunk[i], &v, 8);
        }
        for (uint64_t off = 0; off < bytes; off += chunk.size()) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - off));
            if (::pwrite(fd, chunk.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
                int err = errno;
                ::close(fd);
                ::unlink(path_.c_str());
                throw StorageProbeError(path_ + ": writing the scratch file failed: " + std::strerror(err));
            }
        }
        ::fsync(fd);
        ::close(fd);
        bytes_ = bytes;
    }
    ~ScratchFile() { ::unlink(path_.c_str()); }
    const std::string& path() const { return path_; }
    uint64_t bytes() const { return bytes_; }

private:
    std::string path_;
    uint64_t bytes_ = 0;
};

std::string human_block(uint64_t b) { return b >= (1 << 20) ? std::to_string(b >> 20) + "M" : std::to_string(b >> 10) + "K"; }

}  // namespace

StorageFacts probe_storage(const StorageProbeOptions& opt) {
    StorageFacts s;
    s.path = opt.dir;
    struct statfs sfs {};
    if (::statfs(opt.dir.c_str(), &sfs) != 0) throw StorageProbeError(opt.dir + ": cannot stat the filesystem: " + std::strerror(errno));
    s.filesystem = {fs_name(static_cast<long>(sfs.f_type)), "statfs(" + opt.dir + ")"};
    s.free_bytes = {static_cast<uint64_t>(sfs.f_bavail) * sfs.f_bsize, "statfs(" + opt.dir + ")"};
    if (static_cast<long>(sfs.f_type) == kTmpfsMagic || static_cast<long>(sfs.f_type) == kRamfsMagic)
        throw StorageProbeError(opt.dir + " is on " + fs_name(static_cast<long>(sfs.f_type)) +
                                ", which has no O_DIRECT and no disk behind it: measure the filesystem that will hold "
                                "the model (--storage DIR)");
    s.device = probe_block_device_for_path(FsRoot("/"), opt.dir);

    std::unique_ptr<ScratchFile> scratch;
    uint64_t file_bytes;
    bool readonly = !opt.model_file.empty();
    if (readonly) {
        struct stat st {};
        if (::stat(opt.model_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            throw StorageProbeError(opt.model_file + ": not a readable regular file");
        s.file = opt.model_file;
        file_bytes = static_cast<uint64_t>(st.st_size);
    } else {
        uint64_t bytes = std::min<uint64_t>(opt.scratch_bytes, *s.free_bytes.value / 4);
        bytes = bytes / (1 << 20) * (1 << 20);
        if (bytes < (16u << 20))
            throw StorageProbeError(opt.dir + ": only " + std::to_string(*s.free_bytes.value >> 20) +
                                    " MiB free, too little for a scratch file to measure");
        if (opt.progress) opt.progress("writing a " + std::to_string(bytes >> 20) + " MiB scratch file in " + opt.dir);
        scratch = std::make_unique<ScratchFile>(opt.dir, bytes);
        s.file = scratch->path() + " (scratch, removed)";
        file_bytes = bytes;
    }
    const std::string file = readonly ? opt.model_file : scratch->path();

    bool fio_ok = opt.use_fio;
    if (!opt.use_fio) s.notes.push_back("fio skipped (--no-fio)");
    for (uint64_t bs : opt.block_sizes) {
        if (!fio_ok) break;
        if (opt.progress)
            opt.progress("fio: random reads of " + human_block(bs) + " at queue depth " + std::to_string(opt.queue_depth) + ", O_DIRECT, io_uring, " +
                         std::to_string(static_cast<int>(opt.seconds)) + " s");
        std::string why;
        auto r = run_fio(opt.fio_binary, file, file_bytes / bs * bs, readonly, bs, opt.queue_depth, opt.seconds, why);
        if (!r) {
            s.notes.push_back(why);
            fio_ok = false;
            break;
        }
        s.results.push_back(*r);
    }
    if (opt.progress) opt.progress("built-in io_uring probe: random reads of 1M at queue depth " + std::to_string(opt.queue_depth));
    BandwidthResult own = uring_random_read(file, file_bytes, 1 << 20, opt.queue_depth, opt.seconds);
    s.results.push_back(own);
    for (const auto& r : s.results)
        if (r.tool == "fio" && r.block_size == own.block_size && r.bytes_per_s > 0) {
            double ratio = own.bytes_per_s / r.bytes_per_s;
            if (std::fabs(ratio - 1.0) > 0.2) {
                char buf[200];
                std::snprintf(buf, sizeof buf,
                              "fio and the built-in probe differ by %.0f%% at 1M (%.2f vs %.2f GB/s): "
                              "trust fio's figure",
                              std::fabs(ratio - 1.0) * 100, r.bytes_per_s / 1e9, own.bytes_per_s / 1e9);
                s.notes.push_back(buf);
            }
        }
    return s;
}

}  // namespace moe
