#include "probes/fs_root.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace moe {

FsRoot::FsRoot(std::string root) : root_(root.empty() ? "/" : std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string FsRoot::path(const std::string& abs) const { return root_ == "/" ? abs : root_ + abs; }

std::optional<std::string> FsRoot::read(const std::string& abs) const {
    std::ifstream f(path(abs));
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return std::nullopt;
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
    return s;
}

std::optional<int64_t> FsRoot::read_int(const std::string& abs) const {
    auto s = read(abs);
    if (!s) return std::nullopt;
    try {
        size_t used = 0;
        int64_t v = std::stoll(*s, &used);
        if (used != s->size()) return std::nullopt;
        return v;
    } catch (...) { return std::nullopt; }
}

std::vector<std::string> FsRoot::list(const std::string& abs_dir) const {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(path(abs_dir), ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

bool FsRoot::exists(const std::string& abs) const {
    std::error_code ec;
    return fs::exists(path(abs), ec);
}

std::optional<std::string> FsRoot::resolve(const std::string& abs) const {
    std::error_code ec;
    fs::path p = fs::canonical(path(abs), ec);
    if (ec) return std::nullopt;
    std::string s = p.string();
    if (root_ != "/") {
        if (s.rfind(root_, 0) != 0) return std::nullopt;
        s = s.substr(root_.size());
    }
    return s;
}

std::optional<std::vector<int>> parse_cpu_list(const std::string& s) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ',')) {
        if (part.empty()) continue;
        try {
            size_t dash = part.find('-');
            int a = std::stoi(part.substr(0, dash));
            int b = dash == std::string::npos ? a : std::stoi(part.substr(dash + 1));
            if (a < 0 || b < a || b - a > 65536) return std::nullopt;
            for (int c = a; c <= b; ++c) out.push_back(c);
        } catch (...) { return std::nullopt; }
    }
    return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
    std::vector<int> v = cpus;
    std::sort(v.begin(), v.end());
    std::string out;
    for (size_t i = 0; i < v.size();) {
        size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
        if (!out.empty()) out += ",";
        out += std::to_string(v[i]);
        if (j > i) out += "-" + std::to_string(v[j]);
        i = j + 1;
    }
    return out;
}

}  // namespace moe
