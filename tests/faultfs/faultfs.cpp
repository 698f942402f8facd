// faultfs: a FUSE passthrough filesystem for the disk-fault tests. It serves SOURCE at MOUNTPOINT and, on
// command, fails or delays I/O the way a dying or vanishing disk does, under a real kernel filesystem path
// (page cache bypassed: every read reaches it), so the engine's own I/O code meets the faults.
//
//   faultfs SOURCE MOUNTPOINT        (foreground; unmount with fusermount3 -u MOUNTPOINT)
//
// Commands are lines written to MOUNTPOINT/.faultfs (reading it gives counters):
//   read-eio NAME START END    reads of NAME touching bytes [START, END) fail with EIO
//   read-delay MS              every read waits MS milliseconds first
//   vanish                     every read and write fails with EIO (the disk is gone)
//   write-eio NAME AFTER       writes to files whose name starts with NAME fail once AFTER bytes went to them
//   recover                    all of the above cleared
#define FUSE_USE_VERSION 31
#include <fuse3/fuse.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* kControl = "/.faultfs";

struct Faults {
    std::mutex mu;
    struct Range {
        std::string name;
        uint64_t start, end;
    };
    std::vector<Range> read_eio;
    int delay_ms = 0;
    bool vanished = false;
    std::string write_prefix;
    uint64_t write_after = 0;
    std::map<std::string, uint64_t> written;  // bytes written per file since the write fault was set
    uint64_t reads = 0, eio_reads = 0, writes = 0, eio_writes = 0;
    std::string command_buffer;
};

std::string g_source;
Faults g_faults;

std::string real(const char* path) { return g_source + path; }

// Applies one command line; false when it is not understood.
bool apply(const std::string& line) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    std::lock_guard<std::mutex> lk(g_faults.mu);
    if (cmd == "read-eio") {
        Faults::Range r;
        if (!(in >> r.name >> r.start >> r.end)) return false;
        if (r.name.empty() || r.name[0] != '/') r.name = "/" + r.name;
        g_faults.read_eio.push_back(r);
    } else if (cmd == "read-delay") {
        if (!(in >> g_faults.delay_ms)) return false;
    } else if (cmd == "vanish") {
        g_faults.vanished = true;
    } else if (cmd == "write-eio") {
        if (!(in >> g_faults.write_prefix >> g_faults.write_after)) return false;
        if (g_faults.write_prefix[0] != '/') g_faults.write_prefix = "/" + g_faults.write_prefix;
        g_faults.written.clear();
    } else if (cmd == "recover") {
        g_faults.read_eio.clear();
        g_faults.delay_ms = 0;
        g_faults.vanished = false;
        g_faults.write_prefix.clear();
        g_faults.written.clear();
    } else {
        return !cmd.empty() ? false : true;
    }
    return true;
}

std::string counters() {
    std::lock_guard<std::mutex> lk(g_faults.mu);
    return "reads " + std::to_string(g_faults.reads) + "\neio_reads " + std::to_string(g_faults.eio_reads) + "\nwrites " +
           std::to_string(g_faults.writes) + "\neio_writes " + std::to_string(g_faults.eio_writes) + "\n";
}

int ff_getattr(const char* path, struct stat* st, fuse_file_info*) {
    if (std::strcmp(path, kControl) == 0) {
        std::memset(st, 0, sizeof *st);
        st->st_mode = S_IFREG | 0666;
        st->st_nlink = 1;
        st->st_size = static_cast<off_t>(counters().size());
        return 0;
    }
    return ::lstat(real(path).c_str(), st) == 0 ? 0 : -errno;
}

int ff_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
    DIR* d = ::opendir(real(path).c_str());
    if (!d) return -errno;
    while (dirent* e = ::readdir(d)) fill(buf, e->d_name, nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
    ::closedir(d);
    return 0;
}

int ff_open(const char* path, fuse_file_info* fi) {
    fi->direct_io = 1;  // no page cache: every read and write reaches this filesystem, and its faults
    if (std::strcmp(path, kControl) == 0) {
        fi->fh = static_cast<uint64_t>(-1);
        return 0;
    }
    const int fd = ::open(real(path).c_str(), fi->flags & ~O_DIRECT);
    if (fd < 0) return -errno;
    fi->fh = static_cast<uint64_t>(fd);
    return 0;
}

int ff_create(const char* path, mode_t mode, fuse_file_info* fi) {
    fi->direct_io = 1;
    const int fd = ::open(real(path).c_str(), (fi->flags | O_CREAT) & ~O_DIRECT, mode);
    if (fd < 0) return -errno;
    fi->fh = static_cast<uint64_t>(fd);
    return 0;
}

int ff_read(const char* path, char* buf, size_t size, off_t off, fuse_file_info* fi) {
    if (fi->fh == static_cast<uint64_t>(-1)) {
        const std::string c = counters();
        if (static_cast<size_t>(off) >= c.size()) return 0;
        const size_t n = std::min(size, c.size() - static_cast<size_t>(off));
        std::memcpy(buf, c.data() + off, n);
        return static_cast<int>(n);
    }
    int delay = 0;
    {
        std::lock_guard<std::mutex> lk(g_faults.mu);
        g_faults.reads++;
        bool fail = g_faults.vanished;
        for (const auto& r : g_faults.read_eio)
            if (r.name == path && static_cast<uint64_t>(off) < r.end && static_cast<uint64_t>(off) + size > r.start) fail = true;
        if (fail) {
            g_faults.eio_reads++;
            return -EIO;
        }
        delay = g_faults.delay_ms;
    }
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    const ssize_t n = ::pread(static_cast<int>(fi->fh), buf, size, off);
    return n < 0 ? -errno : static_cast<int>(n);
}

int ff_write(const char* path, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
    if (fi->fh == static_cast<uint64_t>(-1)) {  // commands, one per line (apply() takes the lock)
        std::string pending;
        {
            std::lock_guard<std::mutex> lk(g_faults.mu);
            pending.swap(g_faults.command_buffer);
        }
        pending.append(buf, size);
        size_t start = 0, nl;
        bool ok = true;
        while ((nl = pending.find('\n', start)) != std::string::npos) {
            ok = apply(pending.substr(start, nl - start)) && ok;
            start = nl + 1;
        }
        std::lock_guard<std::mutex> lk(g_faults.mu);
        g_faults.command_buffer = pending.substr(start);
        return ok ? static_cast<int>(size) : -EINVAL;
    }
    {
        std::lock_guard<std::mutex> lk(g_faults.mu);
        g_faults.writes++;
        bool fail = g_faults.vanished;
        if (!g_faults.write_prefix.empty() && std::string(path).rfind(g_faults.write_prefix, 0) == 0) {
            uint64_t& done = g_faults.written[path];
            if (done + size > g_faults.write_after) fail = true;
            else done += size;
        }
        if (fail) {
            g_faults.eio_writes++;
            return -EIO;
        }
    }
    const ssize_t n = ::pwrite(static_cast<int>(fi->fh), buf, size, off);
    return n < 0 ? -errno : static_cast<int>(n);
}

int ff_release(const char*, fuse_file_info* fi) {
    if (fi->fh != static_cast<uint64_t>(-1)) ::close(static_cast<int>(fi->fh));
    return 0;
}

int ff_fsync(const char*, int datasync, fuse_file_info* fi) {
    if (fi->fh == static_cast<uint64_t>(-1)) return 0;
    {
        std::lock_guard<std::mutex> lk(g_faults.mu);
        if (g_faults.vanished) return -EIO;
    }
    return (datasync ? ::fdatasync(static_cast<int>(fi->fh)) : ::fsync(static_cast<int>(fi->fh))) == 0 ? 0 : -errno;
}

int ff_truncate(const char* path, off_t size, fuse_file_info* fi) {
    if (fi && fi->fh != static_cast<uint64_t>(-1)) return ::ftruncate(static_cast<int>(fi->fh), size) == 0 ? 0 : -errno;
    return ::truncate(real(path).c_str(), size) == 0 ? 0 : -errno;
}

int ff_rename(const char* from, const char* to, unsigned int flags) {
    if (flags) return -EINVAL;
    return ::rename(real(from).c_str(), real(to).c_str()) == 0 ? 0 : -errno;
}

int ff_unlink(const char* path) { return ::unlink(real(path).c_str()) == 0 ? 0 : -errno; }
int ff_mkdir(const char* path, mode_t mode) { return ::mkdir(real(path).c_str(), mode) == 0 ? 0 : -errno; }
int ff_rmdir(const char* path) { return ::rmdir(real(path).c_str()) == 0 ? 0 : -errno; }
int ff_statfs(const char*, struct statvfs* st) { return ::statvfs(g_source.c_str(), st) == 0 ? 0 : -errno; }
int ff_access(const char* path, int mask) {
    if (std::strcmp(path, kControl) == 0) return 0;
    return ::access(real(path).c_str(), mask) == 0 ? 0 : -errno;
}
int ff_utimens(const char* path, const struct timespec tv[2], fuse_file_info*) {
    return ::utimensat(AT_FDCWD, real(path).c_str(), tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}
int ff_chmod(const char* path, mode_t mode, fuse_file_info*) { return ::chmod(real(path).c_str(), mode) == 0 ? 0 : -errno; }
int ff_fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info* fi) {
    return ::fallocate(static_cast<int>(fi->fh), mode, off, len) == 0 ? 0 : -errno;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: faultfs SOURCE MOUNTPOINT\n");
        return 2;
    }
    char* src = ::realpath(argv[1], nullptr);
    if (!src) {
        std::fprintf(stderr, "faultfs: %s: %s\n", argv[1], std::strerror(errno));
        return 2;
    }
    g_source = src;
    std::free(src);
    fuse_operations ops{};
    ops.getattr = ff_getattr;
    ops.readdir = ff_readdir;
    ops.open = ff_open;
    ops.create = ff_create;
    ops.read = ff_read;
    ops.write = ff_write;
    ops.release = ff_release;
    ops.fsync = ff_fsync;
    ops.truncate = ff_truncate;
    ops.rename = ff_rename;
    ops.unlink = ff_unlink;
    ops.mkdir = ff_mkdir;
    ops.rmdir = ff_rmdir;
    ops.statfs = ff_statfs;
    ops.access = ff_access;
    ops.utimens = ff_utimens;
    ops.chmod = ff_chmod;
    ops.fallocate = ff_fallocate;
    std::vector<char*> args = {argv[0], const_cast<char*>("-f"), const_cast<char*>("-o"), const_cast<char*>("default_permissions"), argv[2]};
    return fuse_main(static_cast<int>(args.size()), args.data(), &ops, nullptr);
}
