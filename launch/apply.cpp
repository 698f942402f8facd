#include "launch/apply.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "launch/diff.h"
#include "launch/sysctl_render.h"
#include "systemd/unit.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

const char* kBackupRoot = "/var/lib/moestream/backups";

std::string under(const std::string& root, const std::string& abs) { return root == "/" ? abs : root + abs; }

std::optional<std::string> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Write to a temporary name in the same directory, fsync, rename over: readers see old or new, never half.
void write_atomic(const std::string& path, const std::string& content, unsigned mode) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) throw std::runtime_error(path + ": cannot create its directory: " + ec.message());
    const std::string tmp = path + ".moestream-tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) throw std::runtime_error(tmp + ": cannot create: " + std::strerror(errno));
    size_t done = 0;
    while (done < content.size()) {
        ssize_t w = ::write(fd, content.data() + done, content.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw std::runtime_error(tmp + ": write failed: " + std::strerror(err));
        }
        done += static_cast<size_t>(w);
    }
    ::fchmod(fd, mode);
    ::fsync(fd);
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw std::runtime_error(path + ": rename failed: " + std::strerror(err));
    }
}

std::string new_backup_name(const std::string& tag) {
    auto now = std::chrono::system_clock::now();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", std::gmtime(&t));
    return std::string(buf) + "-" + std::to_string(ns % 1000000000) + "-" + tag;
}

}  // namespace

std::vector<GeneratedFile> apply_files(const Plan& p) {
    return {{"/etc/sysctl.d/60-moestream.conf", render_sysctl_conf(p), 0644},
            {"/etc/security/limits.d/99-moestream.conf", render_limits_conf(p), 0644}};
}

GeneratedFile unit_file(const Plan& p) { return {"/etc/systemd/system/moestream.service", render_unit(p), 0644}; }

ApplyResult apply_files_under(const std::vector<GeneratedFile>& files, const std::string& root, bool dry_run, const std::string& tag) {
    ApplyResult r;
    std::vector<const GeneratedFile*> todo;
    for (const auto& f : files) {
        auto old = slurp(under(root, f.install_path));
        if (old && *old == f.content) {
            r.unchanged.push_back(f.install_path);
            continue;
        }
        r.diff += unified_diff(old.value_or(""), f.content, old ? f.install_path : "/dev/null", f.install_path);
        r.changed.push_back(f.install_path);
        todo.push_back(&f);
    }
    if (dry_run || todo.empty()) return r;
    // Back up every file about to be replaced, with a manifest saying which ones did not exist.
    r.backup_dir = under(root, std::string(kBackupRoot) + "/" + new_backup_name(tag));
    std::string manifest;
    for (const auto* f : todo) {
        const std::string target = under(root, f->install_path);
        struct stat st {};
        const bool existed = ::stat(target.c_str(), &st) == 0;
        if (existed) write_atomic(r.backup_dir + "/files" + f->install_path, *slurp(target), st.st_mode & 07777);
        manifest += std::string(existed ? "1 " : "0 ") + std::to_string(existed ? (st.st_mode & 07777) : 0) + " " + f->install_path + "\n";
    }
    write_atomic(r.backup_dir + "/MANIFEST", manifest, 0600);
    for (const auto* f : todo) write_atomic(under(root, f->install_path), f->content, f->mode);
    return r;
}

std::vector<std::string> rollback_latest(const std::string& root) {
    const std::string dir = under(root, kBackupRoot);
    std::vector<std::string> sets;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory()) sets.push_back(it->path().string());
    if (sets.empty()) throw std::runtime_error("no backup to roll back to under " + dir);
    std::sort(sets.begin(), sets.end());
    const std::string set = sets.back();
    auto manifest = slurp(set + "/MANIFEST");
    if (!manifest) throw std::runtime_error(set + "/MANIFEST: missing: this backup is incomplete, restore by hand");
    std::vector<std::string> restored;
    std::istringstream in(*manifest);
    int existed;
    unsigned mode;
    std::string path;
    while (in >> existed >> mode >> path) {
        const std::string target = under(root, path);
        if (existed) {
            auto content = slurp(set + "/files" + path);
            if (!content) throw std::runtime_error(set + "/files" + path + ": missing from the backup");
            write_atomic(target, *content, mode);
        } else {
            fs::remove(target, ec);
        }
        restored.push_back(path);
    }
    fs::remove_all(set, ec);
    return restored;
}

std::vector<std::string> apply_sysctl_now(const Plan& p) {
    std::vector<std::string> done;
    for (const auto& s : p.sysctl) {
        std::string rel = s.key;
        std::replace(rel.begin(), rel.end(), '.', '/');
        std::ofstream f("/proc/sys/" + rel);
        if (!(f << s.value << "\n")) throw std::runtime_error("/proc/sys/" + rel + ": cannot write " + s.value + " (not root?)");
        done.push_back(s.key + " = " + s.value);
    }
    return done;
}

}  // namespace moe
