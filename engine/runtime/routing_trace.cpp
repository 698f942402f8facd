#include "engine/runtime/routing_trace.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace moe {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'T', 'R', 'C', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxLayers = 65535, kMaxExperts = 65536, kMaxUsed = 256, kMaxName = 256;
constexpr size_t kRecordHead = 8;  // kind u8, k u8, layer u16, count u32

template <class T>
void put(std::vector<uint8_t>& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& b, const std::string& s) {
    put<uint16_t>(b, static_cast<uint16_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
}

// Bounds-checked cursor over the file's bytes; every failure names the file, the offset and the field.
struct Cursor {
    std::span<const uint8_t> bytes;
    const std::string& name;
    size_t at = 0;
    [[noreturn]] void fail(const std::string& what) const {
        throw RoutingTraceError(name + ": routing trace at byte " + std::to_string(at) + ": " + what);
    }
    size_t left() const { return bytes.size() - at; }
    template <class T>
    T get(const char* field) {
        if (left() < sizeof(T)) fail(std::string(field) + " cut short (file truncated?)");
        T v;
        std::memcpy(&v, bytes.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string get_string(const char* field) {
        const uint16_t n = get<uint16_t>(field);
        if (n > kMaxName) fail(std::string(field) + " of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxName) + ")");
        if (left() < n) fail(std::string(field) + " cut short");
        std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
        at += n;
        return s;
    }
};

std::vector<uint8_t> encode_header(const RoutingTraceHeader& h) {
    std::vector<uint8_t> b(kMagic, kMagic + 8);
    put<uint32_t>(b, kVersion);
    put<uint32_t>(b, 0);  // header bytes, filled below
    put_string(b, h.arch);
    put<uint32_t>(b, h.n_layer);
    put<uint32_t>(b, h.n_expert);
    put<uint32_t>(b, h.n_expert_used);
    put<uint64_t>(b, h.model_hash);
    put<uint64_t>(b, h.slot_bytes);
    put<uint64_t>(b, h.cache_bytes);
    put_string(b, h.policy);
    put<uint32_t>(b, h.prefetch_layers);
    put<uint64_t>(b, h.prefetch_cap);
    put<uint64_t>(b, h.steps_dropped);
    for (uint32_t v : h.load_bytes) put<uint32_t>(b, v);
    const uint32_t n = static_cast<uint32_t>(b.size());
    std::memcpy(b.data() + 12, &n, 4);
    return b;
}

RoutingTraceHeader decode_header(Cursor& c) {
    if (c.left() < 8 || std::memcmp(c.bytes.data(), kMagic, 8) != 0) c.fail("not a moestream routing trace (magic)");
    c.at = 8;
    const uint32_t version = c.get<uint32_t>("version");
    if (version != kVersion) c.fail("version " + std::to_string(version) + " (this build reads " + std::to_string(kVersion) + ")");
    const uint32_t header_bytes = c.get<uint32_t>("header size");
    RoutingTraceHeader h;
    h.arch = c.get_string("architecture");
    h.n_layer = c.get<uint32_t>("layer count");
    h.n_expert = c.get<uint32_t>("expert count");
    h.n_expert_used = c.get<uint32_t>("experts used");
    if (h.n_layer == 0 || h.n_layer > kMaxLayers) c.fail("layer count " + std::to_string(h.n_layer));
    if (h.n_expert == 0 || h.n_expert > kMaxExperts) c.fail("expert count " + std::to_string(h.n_expert));
    if (h.n_expert_used == 0 || h.n_expert_used > std::min(h.n_expert, kMaxUsed)) c.fail("experts used " + std::to_string(h.n_expert_used));
    h.model_hash = c.get<uint64_t>("model hash");
    h.slot_bytes = c.get<uint64_t>("slot bytes");
    h.cache_bytes = c.get<uint64_t>("cache bytes");
    h.policy = c.get_string("policy");
    h.prefetch_layers = c.get<uint32_t>("prefetch layers");
    h.prefetch_cap = c.get<uint64_t>("prefetch cap");
    h.steps_dropped = c.get<uint64_t>("steps dropped");
    const uint64_t n = static_cast<uint64_t>(h.n_layer) * h.n_expert;
    if (c.left() / 4 < n) c.fail("expert load table cut short (" + std::to_string(n) + " entries)");
    h.load_bytes.resize(n);
    std::memcpy(h.load_bytes.data(), c.bytes.data() + c.at, n * 4);
    c.at += n * 4;
    if (c.at != header_bytes) c.fail("header size " + std::to_string(header_bytes) + " does not match its fields (" + std::to_string(c.at) + ")");
    for (uint64_t i = 0; i < n; ++i)
        if (h.load_bytes[i] > h.slot_bytes) {
            c.at = 0;
            c.fail("expert load of " + std::to_string(h.load_bytes[i]) + " bytes (layer " + std::to_string(i / h.n_expert) +
                   ") larger than a slot (" + std::to_string(h.slot_bytes) + ")");
        }
    return h;
}

// One step from c.at; false when the bytes end inside it (a cut tail). Throws on malformed records.
bool decode_step(Cursor& c, const RoutingTraceHeader& h, TraceStep& step) {
    const size_t start = c.at;
    auto cut = [&]() {
        c.at = start;
        return false;
    };
    if (c.left() < kRecordHead) return cut();
    if (c.bytes[c.at] != 'S') c.fail(std::string("expected a step record, found kind ") + std::to_string(c.bytes[c.at]));
    c.at += 4;
    step = {};
    step.n_tokens = c.get<uint32_t>("step tokens");
    if (step.n_tokens == 0 || step.n_tokens > (1u << 20)) c.fail("step of " + std::to_string(step.n_tokens) + " tokens");
    for (;;) {
        if (c.left() < kRecordHead) return cut();
        const size_t record = c.at;
        const char kind = static_cast<char>(c.bytes[c.at]);
        const uint32_t k = c.bytes[c.at + 1];
        uint16_t layer;
        uint32_t count;
        std::memcpy(&layer, c.bytes.data() + c.at + 2, 2);
        std::memcpy(&count, c.bytes.data() + c.at + 4, 4);
        c.at += kRecordHead;
        if (kind == 'E') {
            if (c.left() < 16) return cut();
            step.wall_ns = c.get<uint64_t>("wall time");
            step.io_wait_ns = c.get<uint64_t>("I/O wait");
            return true;
        }
        if (kind != 'R' && kind != 'D' && kind != 'P' && kind != 'X') {
            c.at = record;
            c.fail("unknown record kind " + std::to_string(static_cast<uint8_t>(kind)));
        }
        if (layer >= h.n_layer) {
            c.at = record;
            c.fail(std::string("record '") + kind + "' for layer " + std::to_string(layer) + " of " + std::to_string(h.n_layer));
        }
        TraceLayerEvent ev;
        ev.kind = kind;
        ev.layer = layer;
        uint64_t ids = count;
        if (kind == 'R') {
            if (count == 0 || count > step.n_tokens || k == 0 || k > h.n_expert_used) {
                c.at = record;
                c.fail("route record of " + std::to_string(count) + " tokens x " + std::to_string(k) + " experts in a step of " +
                       std::to_string(step.n_tokens) + " tokens (" + std::to_string(h.n_expert_used) + " used)");
            }
            ev.k = k;
            ids = static_cast<uint64_t>(count) * k;
        } else if (count > h.n_expert) {
            c.at = record;
            c.fail(std::string("record '") + kind + "' of " + std::to_string(count) + " experts (" + std::to_string(h.n_expert) + " exist)");
        }
        const uint64_t payload = ids * 2 + (kind == 'R' ? ids * 4 : kind == 'X' ? 0 : ids);
        if (c.left() < payload) return cut();
        ev.experts.resize(ids);
        if (ids) std::memcpy(ev.experts.data(), c.bytes.data() + c.at, ids * 2);
        c.at += ids * 2;
        for (uint16_t e : ev.experts)
            if (e >= h.n_expert) {
                c.at = record;
                c.fail(std::string("record '") + kind + "' names expert " + std::to_string(e) + " (" + std::to_string(h.n_expert) + " exist)");
            }
        if (kind == 'R') {
            ev.weights.resize(ids);
            std::memcpy(ev.weights.data(), c.bytes.data() + c.at, ids * 4);  // ids > 0: count and k are
            c.at += ids * 4;
        } else if (kind != 'X') {
            ev.flags.assign(c.bytes.data() + c.at, c.bytes.data() + c.at + ids);
            for (uint8_t f : ev.flags)
                if (f > (kind == 'D' ? 3 : 1) || (kind == 'D' && f == 2)) c.fail(std::string("record '") + kind + "' flag " + std::to_string(f));
            c.at += ids;
            if (h.load_bytes[static_cast<size_t>(layer) * h.n_expert] == 0) {
                c.at = record;
                c.fail(std::string("record '") + kind + "' for layer " + std::to_string(layer) + ", which has no routed experts");
            }
        }
        step.events.push_back(std::move(ev));
    }
}

std::string sys_error(const std::string& path, const std::string& what) { return path + ": " + what + ": " + std::strerror(errno); }

void write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw RoutingTraceError(sys_error(path, "writing the routing trace"));
        p += w;
        n -= static_cast<size_t>(w);
    }
}

std::vector<uint8_t> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw RoutingTraceError(path + ": cannot open the routing trace: " + std::strerror(errno));
    return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

bool RoutingTraceHeader::same_model(const RoutingTraceHeader& o) const {
    return arch == o.arch && n_layer == o.n_layer && n_expert == o.n_expert && n_expert_used == o.n_expert_used && model_hash == o.model_hash;
}

uint64_t routing_model_hash(const std::vector<std::string>& files, const std::vector<uint64_t>& data_offsets) {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(st.get());
    std::vector<char> buf;
    for (size_t i = 0; i < files.size(); ++i) {
        std::error_code ec;
        const uint64_t size = std::filesystem::file_size(files[i], ec);
        XXH3_64bits_update(st.get(), &size, sizeof size);
        std::ifstream f(files[i], std::ios::binary);
        buf.resize(std::min<uint64_t>(data_offsets.at(i), 64ull << 20));
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        XXH3_64bits_update(st.get(), buf.data(), static_cast<size_t>(f.gcount()));
    }
    return XXH3_64bits_digest(st.get());
}

std::vector<uint8_t> encode_routing_trace_header(const RoutingTraceHeader& h) { return encode_header(h); }

RoutingTrace parse_routing_trace(std::span<const uint8_t> bytes, const std::string& name, bool strict_tail) {
    Cursor c{bytes, name};
    RoutingTrace t;
    t.header = decode_header(c);
    while (c.left() > 0) {
        TraceStep step;
        if (!decode_step(c, t.header, step)) {
            if (strict_tail) c.fail("last step cut short");
            break;
        }
        t.steps.push_back(std::move(step));
    }
    return t;
}

RoutingTrace read_routing_trace(const std::string& path) {
    const auto bytes = read_all(path);
    return parse_routing_trace(bytes, path);
}

RoutingTrace read_routing_traces(const std::vector<std::string>& paths) {
    RoutingTrace all;
    for (size_t i = 0; i < paths.size(); ++i) {
        RoutingTrace t = read_routing_trace(paths[i]);
        if (i == 0) all.header = t.header;
        else if (!t.header.same_model(all.header))
            throw RoutingTraceError(paths[i] + ": routing trace of another model than " + paths[0] + " (" + t.header.arch + ", model hash " +
                                    std::to_string(t.header.model_hash) + " against " + std::to_string(all.header.model_hash) + ")");
        for (auto& s : t.steps) all.steps.push_back(std::move(s));
    }
    return all;
}

RoutingTraceWriter::RoutingTraceWriter(const std::string& path, RoutingTraceHeader header, uint64_t max_bytes)
    : path_(path), header_(std::move(header)), max_bytes_(max_bytes) {
    if (header_.load_bytes.size() != static_cast<size_t>(header_.n_layer) * header_.n_expert)
        throw RoutingTraceError(path + ": routing trace header: load table of " + std::to_string(header_.load_bytes.size()) + " entries");
    header_bytes_ = encode_header(header_).size();
    if (max_bytes_ < header_bytes_ + (64u << 10))
        throw RoutingTraceError(path + ": routing trace bound of " + std::to_string(max_bytes_) + " bytes cannot hold its header (" +
                                std::to_string(header_bytes_) + " bytes) and a step");
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw RoutingTraceError(sys_error(path, "cannot open the routing trace"));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd_);
        throw RoutingTraceError(path + ": routing trace in use by another process");
    }
    struct stat st {};
    ::fstat(fd_, &st);
    if (st.st_size > 0) {
        // Continue the same model's trace: keep its whole steps (trimming a cut last one), take this run's settings.
        std::vector<uint8_t> bytes, body;
        try {
            bytes = read_all(path);
            Cursor c{bytes, path};
            const RoutingTraceHeader old = decode_header(c);
            if (!old.same_model(header_))
                throw RoutingTraceError(path + ": routing trace of another model (" + old.arch + ", " + std::to_string(old.n_layer) + " layers x " +
                                        std::to_string(old.n_expert) + " experts, model hash " + std::to_string(old.model_hash) + ")");
            header_.steps_dropped = old.steps_dropped;
            const size_t old_header = c.at;
            TraceStep step;
            for (size_t at = c.at; decode_step(c, old, step); at = c.at) step_offsets_.push_back(at - old_header + header_bytes_);
            body.assign(bytes.begin() + static_cast<std::ptrdiff_t>(old_header), bytes.begin() + static_cast<std::ptrdiff_t>(c.at));
        } catch (const RoutingTraceError& e) {
            ::close(fd_);
            throw RoutingTraceError(std::string(e.what()) + "; move it away or pick another --routing-trace file");
        }
        // Rewrite: this run's header (its size can differ from the old one's) and the whole steps.
        try {
            rewrite(body);
        } catch (...) {
            ::close(fd_);
            fd_ = -1;
            throw;
        }
    } else {
        write_header_file(fd_);
        file_bytes_ = header_bytes_;
    }
}

RoutingTraceWriter::~RoutingTraceWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void RoutingTraceWriter::write_header_file(int fd) const {
    const auto b = encode_header(header_);
    write_all(fd, b.data(), b.size(), path_);
}

void RoutingRecorder::put_record(char kind, uint8_t k, uint32_t layer, uint32_t count) {
    step_.push_back(static_cast<uint8_t>(kind));
    step_.push_back(k);
    put<uint16_t>(step_, static_cast<uint16_t>(layer));
    put<uint32_t>(step_, count);
}

void RoutingRecorder::begin_step(uint32_t n_tokens) {
    step_.clear();
    release_record_ = SIZE_MAX;
    in_step_ = n_tokens > 0;
    if (in_step_) put_record('S', 0, 0, n_tokens);
}

void RoutingRecorder::route(uint32_t layer, int n_tokens, int k, const int* experts, const float* weights) {
    if (!in_step_) return;
    release_record_ = SIZE_MAX;
    put_record('R', static_cast<uint8_t>(k), layer, static_cast<uint32_t>(n_tokens));
    const size_t n = static_cast<size_t>(n_tokens) * static_cast<size_t>(k);
    for (size_t i = 0; i < n; ++i) put<uint16_t>(step_, static_cast<uint16_t>(experts[i]));
    const size_t at = step_.size();
    step_.resize(at + n * 4);
    std::memcpy(step_.data() + at, weights, n * 4);
}

void RoutingRecorder::release(uint32_t layer, uint32_t expert) {
    if (!in_step_) return;
    uint16_t open_layer = 0;
    if (release_record_ != SIZE_MAX) std::memcpy(&open_layer, step_.data() + release_record_ + 2, 2);
    if (release_record_ == SIZE_MAX || open_layer != layer) {
        release_record_ = step_.size();
        put_record('X', 0, layer, 0);
    }
    uint32_t count;
    std::memcpy(&count, step_.data() + release_record_ + 4, 4);
    ++count;
    std::memcpy(step_.data() + release_record_ + 4, &count, 4);
    put<uint16_t>(step_, static_cast<uint16_t>(expert));
}

void RoutingRecorder::demand(uint32_t layer, std::span<const uint32_t> experts, std::span<const uint8_t> hit) {
    if (!in_step_) return;
    release_record_ = SIZE_MAX;
    put_record('D', 0, layer, static_cast<uint32_t>(experts.size()));
    for (uint32_t e : experts) put<uint16_t>(step_, static_cast<uint16_t>(e));
    step_.insert(step_.end(), hit.begin(), hit.end());
}

void RoutingRecorder::prefetch(uint32_t layer, std::span<const uint32_t> predicted, std::span<const uint8_t> issued) {
    if (!in_step_) return;
    release_record_ = SIZE_MAX;
    put_record('P', 0, layer, static_cast<uint32_t>(predicted.size()));
    for (uint32_t e : predicted) put<uint16_t>(step_, static_cast<uint16_t>(e));
    step_.insert(step_.end(), issued.begin(), issued.end());
}

void RoutingRecorder::end_step(uint64_t wall_ns, uint64_t io_wait_ns) {
    if (!in_step_) return;
    in_step_ = false;
    put_record('E', 0, 0, 0);
    put<uint64_t>(step_, wall_ns);
    put<uint64_t>(step_, io_wait_ns);
    append_step(step_);
}

void RoutingTraceWriter::append_step(std::span<const uint8_t> step) {
    ::lseek(fd_, static_cast<off_t>(file_bytes_), SEEK_SET);
    write_all(fd_, step.data(), step.size(), path_);
    step_offsets_.push_back(file_bytes_);
    file_bytes_ += step.size();
    steps_written_++;
    if (file_bytes_ > max_bytes_) drop_oldest();
}

// Keeps the newest steps that fit in three quarters of the bound (so the rewrite is not paid every step).
void RoutingTraceWriter::drop_oldest() {
    const uint64_t keep = (max_bytes_ - header_bytes_) * 3 / 4;
    size_t first = 0;
    while (first + 1 < step_offsets_.size() && file_bytes_ - step_offsets_[first] > keep) ++first;
    if (first == 0) return;
    const uint64_t from = step_offsets_[first];
    std::vector<uint8_t> body(file_bytes_ - from);
    if (::pread(fd_, body.data(), body.size(), static_cast<off_t>(from)) != static_cast<ssize_t>(body.size()))
        throw RoutingTraceError(sys_error(path_, "reading back the routing trace"));
    header_.steps_dropped += first;
    rewrite(body);
    for (size_t i = first; i < step_offsets_.size(); ++i) step_offsets_[i - first] = step_offsets_[i] - from + header_bytes_;
    step_offsets_.resize(step_offsets_.size() - first);
}

void RoutingTraceWriter::rewrite(const std::vector<uint8_t>& body) {
    const std::string tmp = path_ + ".tmp";
    const int t = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t < 0) throw RoutingTraceError(sys_error(tmp, "cannot write"));
    try {
        write_header_file(t);
        write_all(t, body.data(), body.size(), tmp);
        if (::fsync(t) != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0)
            throw RoutingTraceError(sys_error(path_, "cannot replace the routing trace"));
    } catch (...) {
        ::close(t);
        ::unlink(tmp.c_str());
        throw;
    }
    // The renamed file is the trace now: its descriptor and lock replace the old inode's.
    ::close(t);
    ::close(fd_);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) throw RoutingTraceError(sys_error(path_, "cannot reopen the routing trace"));
    file_bytes_ = header_bytes_ + body.size();
    ::lseek(fd_, static_cast<off_t>(file_bytes_), SEEK_SET);
}

}  // namespace moe
