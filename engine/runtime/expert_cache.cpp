#include "engine/runtime/expert_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace moe {

namespace {
constexpr uint64_t kAlign = 4096;
uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
std::string mib(uint64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; }
}  // namespace

uint64_t StreamingExpertSource::slot_bytes_for(const std::vector<LayerTensors>& layers) {
    uint64_t total = 0;
    for (int kind = 0; kind < 3; ++kind) {
        uint64_t m = 0;
        for (const auto& l : layers) {
            const ExpertTensor* t = kind == 0 ? l.gate : kind == 1 ? l.up : l.down;
            if (t) m = std::max<uint64_t>(m, align_up(t->expert_bytes + kAlign - 1));
        }
        total += m;
    }
    return total;
}

uint64_t StreamingExpertSource::gguf_load_bytes(const LayerTensors& l, uint32_t expert) {
    uint64_t total = 0;
    for (const ExpertTensor* t : {l.gate, l.up, l.down}) {
        if (!t) return 0;
        const uint64_t off = t->file_offset + static_cast<uint64_t>(expert) * t->expert_stride;
        total += align_up(off + t->expert_bytes) - off / kAlign * kAlign;
    }
    return total;
}

uint64_t StreamingExpertSource::load_bytes(uint32_t layer, uint32_t expert) const {
    const LayerTensors& l = layers_.at(layer);
    if (!l.gate) return 0;
    if (opt_.store && record_state_[static_cast<size_t>(key_of(layer, expert))] != RecordState::Bad) return opt_.store->layer(layer).stride;
    return gguf_load_bytes(l, expert);
}

uint64_t StreamingExpertSource::prefetch_cap() const { return static_cast<uint64_t>(std::max(1, opt_.io.queue_depth)) * opt_.read_size / 2; }

StreamingExpertSource::StreamingExpertSource(const std::vector<std::string>& files, const std::vector<LayerTensors>& layers, uint32_t n_expert,
                                             uint32_t n_expert_used, StreamingOptions opt)
    : layers_(layers), n_expert_(n_expert), opt_(std::move(opt)) {
    if (opt_.read_size < kAlign || opt_.read_size % kAlign) opt_.read_size = 1 << 20;
    uint64_t off = 0;
    for (int kind = 0; kind < 3; ++kind) {
        region_off_[kind] = off;
        uint64_t m = 0;
        for (const auto& l : layers_) {
            const ExpertTensor* t = kind == 0 ? l.gate : kind == 1 ? l.up : l.down;
            if (t) m = std::max<uint64_t>(m, align_up(t->expert_bytes + kAlign - 1));
        }
        off += m;
    }
    slot_bytes_ = off;
    if (slot_bytes_ == 0) throw ModelError("the model has no routed experts to stream");
    if (opt_.store) {
        if (opt_.store->n_layer() != layers_.size() || opt_.store->n_expert() != n_expert_)
            throw ModelError(opt_.store->path() + ": expert store does not match the model's layers and experts");
        for (uint32_t l = 0; l < opt_.store->n_layer(); ++l) slot_bytes_ = std::max(slot_bytes_, opt_.store->layer(l).stride);
    }
    const uint64_t min_bytes = slot_bytes_ * n_expert_used;
    if (opt_.cache_bytes < min_bytes)
        throw ModelError("expert cache of " + mib(opt_.cache_bytes) + " cannot hold one layer's selected experts: the minimum is " + mib(min_bytes) +
                         " (" + std::to_string(n_expert_used) + " x " + mib(slot_bytes_) + ")");
    const size_t n_slots = static_cast<size_t>(opt_.cache_bytes / slot_bytes_);
    arena_bytes_ = n_slots * slot_bytes_;
    try {
        arena_memory_ = WeightMemory(arena_bytes_, kAlign);  // O_DIRECT reads land here
    } catch (const std::bad_alloc&) { throw ModelError("cannot allocate the expert cache (" + mib(arena_bytes_) + ")"); }
    arena_ = arena_memory_.data();
    slots_.resize(n_slots);
    for (size_t i = 0; i < n_slots; ++i) {
        slots_[i].mem = arena_ + i * slot_bytes_;
        free_.push_back(static_cast<int>(n_slots - 1 - i));
    }
    freq_.assign(static_cast<size_t>(layers_.size()) * n_expert_, 0);
    permanent_key_.assign(freq_.size(), false);
    record_state_.assign(opt_.store ? freq_.size() : 0, RecordState::Unchecked);
    read_files_ = files;
    if (opt_.store) read_files_.push_back(opt_.store->path());
    try {
        reader_ = std::make_unique<BlockReader>(read_files_, opt_.io);
    } catch (const std::runtime_error& e) { throw ModelError(e.what()); }
    if (n_slots <= 1024) {  // one fixed buffer per slot; the kernel may refuse (RLIMIT_MEMLOCK)
        std::vector<std::pair<void*, size_t>> regions;
        for (auto& s : slots_) regions.emplace_back(s.mem, slot_bytes_);
        registered_ = reader_->register_buffers(regions);
    }
    // Pinned experts from a routing profile: at most half the slots, loaded now.
    const size_t max_pinned = n_slots / 2;
    std::vector<uint32_t> pinned_keys;
    for (const auto& [l, e] : opt_.pinned) {
        if (pinned_keys.size() >= max_pinned) break;
        if (l >= layers_.size() || e >= n_expert_ || !layers_[l].gate) continue;
        permanent_key_[static_cast<size_t>(key_of(l, e))] = true;
        int s = allocate_slot();
        slots_[s].permanent = true;
        start_load(s, l, e, true);
        pinned_keys.push_back(static_cast<uint32_t>(s));
    }
    usable_slots_ = n_slots - pinned_keys.size();
    while (reader_->in_flight() > 0 || reader_->queued() > 0)
        for (const auto& c : reader_->reap(true)) complete(c);
}

StreamingExpertSource::~StreamingExpertSource() {
    reader_.reset();  // waits for reads in flight before the arena goes
}

StreamingExpertSource::Window StreamingExpertSource::window(uint32_t layer, uint32_t expert, int kind) const {
    const LayerTensors& l = layers_.at(layer);
    const ExpertTensor* t = kind == 0 ? l.gate : kind == 1 ? l.up : l.down;
    const uint64_t off = t->file_offset + static_cast<uint64_t>(expert) * t->expert_stride;
    const uint64_t start = off / kAlign * kAlign;
    return {t->file_index, start, align_up(off + t->expert_bytes) - start, off - start, off + t->expert_bytes};
}

ExpertView StreamingExpertSource::view(const Slot& s) const {
    ExpertView v;
    const uint8_t* p[3];
    for (int kind = 0; kind < 3; ++kind)
        p[kind] = s.from_store ? s.mem + opt_.store->layer(s.layer).part_offset[kind]
                               : s.mem + region_off_[kind] + window(s.layer, s.expert, kind).skew;
    v.gate = p[0];
    v.up = p[1];
    v.down = p[2];
    return v;
}

void StreamingExpertSource::lru_remove(int s) {
    Slot& x = slots_[s];
    if (!x.in_list) return;
    if (x.prev >= 0) slots_[x.prev].next = x.next;
    else lru_head_ = x.next;
    if (x.next >= 0) slots_[x.next].prev = x.prev;
    else lru_tail_ = x.prev;
    x.prev = x.next = -1;
    x.in_list = false;
}

void StreamingExpertSource::lru_push_back(int s) {
    Slot& x = slots_[s];
    lru_remove(s);
    x.prev = lru_tail_;
    x.next = -1;
    if (lru_tail_ >= 0) slots_[lru_tail_].next = s;
    lru_tail_ = s;
    if (lru_head_ < 0) lru_head_ = s;
    x.in_list = true;
}

void StreamingExpertSource::lru_push_front(int s) {
    Slot& x = slots_[s];
    lru_remove(s);
    x.next = lru_head_;
    x.prev = -1;
    if (lru_head_ >= 0) slots_[lru_head_].prev = s;
    lru_head_ = s;
    if (lru_tail_ < 0) lru_tail_ = s;
    x.in_list = true;
}

int StreamingExpertSource::victim() const {
    // Oldest unpinned slots first; the frequency policy keeps the most-used of the last few.
    return pick_victim(
        opt_.policy, lru_tail_, [&](int s) { return slots_[s].prev; },
        [&](int s) {
            const Slot& x = slots_[s];
            return x.pins == 0 && !x.loading && !x.permanent && !x.protect;
        },
        [&](int s) { return freq_[static_cast<size_t>(slots_[s].key)]; });
}

int StreamingExpertSource::allocate_slot() {
    if (!free_.empty()) {
        int s = free_.back();
        free_.pop_back();
        return s;
    }
    const int best = victim();
    if (best < 0) return -1;
    Slot& v = slots_[best];
    lru_remove(best);
    map_.erase(v.key);
    v.key = -1;
    v.valid = false;
    stats_.evictions++;
    return best;
}

void StreamingExpertSource::submit_chunk(uint32_t ci, bool urgent) {
    const Chunk& c = chunks_[ci];
    reader_->read(c.file, c.offset, c.len, c.dst, ci, urgent, registered_ ? c.slot : -1);
    stats_.reads_submitted++;
}

void StreamingExpertSource::start_load(int si, uint32_t layer, uint32_t expert, bool urgent, bool from_gguf) {
    Slot& s = slots_[si];
    if (s.key != key_of(layer, expert)) s.attempts = 0;
    s.key = key_of(layer, expert);
    s.layer = layer;
    s.expert = expert;
    s.valid = false;
    s.loading = true;
    s.error.clear();
    s.pending = 0;
    map_[s.key] = si;
    s.from_store = !from_gguf && opt_.store && record_state_[static_cast<size_t>(s.key)] != RecordState::Bad;
    s.load_bytes = 0;
    if (s.from_store) {  // one contiguous record
        const uint64_t at = opt_.store->record_offset(layer, expert), len = opt_.store->layer(layer).stride;
        queue_reads(si, static_cast<uint32_t>(read_files_.size() - 1), at, len, at + len, s.mem, urgent);
        s.load_bytes = len;
        stats_.store_loads++;
    } else {
        for (int kind = 0; kind < 3; ++kind) {
            const Window w = window(layer, expert, kind);
            queue_reads(si, w.file, w.start, w.length, w.used_end, s.mem + region_off_[kind], urgent);
            s.load_bytes += w.length;
        }
    }
    loading_bytes_ += s.load_bytes;
}

void StreamingExpertSource::queue_reads(int si, uint32_t file, uint64_t start, uint64_t length, uint64_t used_end, uint8_t* dst, bool urgent) {
    for (uint64_t done = 0; done < length; done += opt_.read_size) {
        const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(opt_.read_size, length - done));
        uint32_t ci;
        if (!free_chunks_.empty()) {
            ci = free_chunks_.back();
            free_chunks_.pop_back();
        } else {
            ci = static_cast<uint32_t>(chunks_.size());
            chunks_.push_back({});
        }
        const uint64_t chunk_off = start + done;
        const uint32_t need = static_cast<uint32_t>(std::min<uint64_t>(len, used_end > chunk_off ? used_end - chunk_off : 0));
        chunks_[ci] = {static_cast<uint32_t>(si), file, chunk_off, len, need, dst + done};
        slots_[si].pending++;
        submit_chunk(ci, urgent);
    }
}

bool StreamingExpertSource::store_record_ok(int si) {
    Slot& s = slots_[si];
    RecordState& state = record_state_[static_cast<size_t>(s.key)];
    if (state == RecordState::Good) return true;
    if (ExpertStore::record_hash(s.mem, opt_.store->layer(s.layer)) == opt_.store->checksum(s.layer, s.expert)) {
        state = RecordState::Good;
        return true;
    }
    state = RecordState::Bad;
    stats_.store_bad_records++;
    if (opt_.warn)
        opt_.warn(opt_.store->path() + ": record of expert " + std::to_string(s.expert) + " of layer " + std::to_string(s.layer) +
                  " fails its checksum; reading it from the GGUF from now on (moestream repack --verify lists every bad record)");
    return false;
}

void StreamingExpertSource::complete(const ReadCompletion& c) {
    const uint32_t ci = static_cast<uint32_t>(c.tag);
    Chunk ch = chunks_.at(ci);
    Slot& s = slots_[ch.slot];
    if (c.result > 0 && static_cast<uint32_t>(c.result) < ch.need && c.result % static_cast<int>(kAlign) == 0) {
        // A short but aligned read that still lacks bytes we need: ask for the rest.
        chunks_[ci].offset += static_cast<uint32_t>(c.result);
        chunks_[ci].dst += c.result;
        chunks_[ci].len -= static_cast<uint32_t>(c.result);
        chunks_[ci].need -= static_cast<uint32_t>(c.result);
        stats_.bytes_read += static_cast<uint64_t>(c.result);
        submit_chunk(ci, true);
        return;
    }
    free_chunks_.push_back(ci);
    // Past the end of the file the aligned window may read short; only the bytes the expert uses count.
    if (c.result < 0 || static_cast<uint32_t>(c.result) < ch.need) {
        if (s.error.empty())
            s.error = "reading expert " + std::to_string(s.expert) + " of layer " + std::to_string(s.layer) + " at offset " +
                      std::to_string(ch.offset) + " (" + std::to_string(ch.len) + " bytes): " +
                      (c.result < 0 ? std::string(std::strerror(-c.result))
                                    : "short read of " + std::to_string(c.result) + " bytes (file truncated or replaced?)");
    } else {
        stats_.bytes_read += static_cast<uint64_t>(c.result);
    }
    if (--s.pending > 0) return;
    const int si = static_cast<int>(ch.slot);
    loading_bytes_ -= s.load_bytes;
    if (s.from_store && !s.error.empty()) {
        // The store's copy could not be read: the GGUF holds the same bytes, maybe on a healthy part of the disk.
        stats_.store_read_fallbacks++;
        if (opt_.health) opt_.health->fell_back(opt_.store->path() + ": " + s.error);
        if (opt_.warn) opt_.warn(opt_.store->path() + ": " + s.error + "; reading it from the GGUF");
        start_load(si, s.layer, s.expert, s.demanded, true);
        return;
    }
    if (s.error.empty() && s.from_store && !store_record_ok(si)) {
        start_load(si, s.layer, s.expert, s.demanded);  // the same expert again, from the GGUF
        return;
    }
    s.loading = false;
    s.valid = s.error.empty();
    if (opt_.health) {
        if (s.valid) opt_.health->load_ok();
        else opt_.health->load_failed(s.error);
    }
    if (s.demanded) {
        ready_.push_back(si);
    } else if (!s.valid) {  // a failed prefetch: forget it
        lru_remove(si);
        map_.erase(s.key);
        s.key = -1;
        s.protect = false;
        free_.push_back(si);
    } else if (s.pins == 0 && !s.permanent && !s.in_list) {  // an abandoned demand load (prefetches are listed already)
        lru_push_front(si);
    }
}

void StreamingExpertSource::request(uint32_t layer, std::span<const uint32_t> experts) {
    if (layer >= layers_.size() || !layers_[layer].gate) throw ModelError("layer " + std::to_string(layer) + " has no routed experts");
    // Prefetches for this layer that the router did not pick are no longer worth protecting.
    for (auto& s : slots_)
        if (s.protect && s.layer == layer && std::find(experts.begin(), experts.end(), s.expert) == experts.end()) s.protect = false;
    if (++requests_ % kFrequencyDecayEvery == 0)
        for (auto& f : freq_) f >>= 1;
    // Pinned experts have slots of their own: the step's demand on the others is what can overflow.
    insertion_.on_request(static_cast<size_t>(std::count_if(
        experts.begin(), experts.end(), [&](uint32_t e) { return e >= n_expert_ || !permanent_key_[static_cast<size_t>(key_of(layer, e))]; })));
    flags_.assign(experts.size(), 0);
    for (size_t i = 0; i < experts.size(); ++i) {
        const uint32_t e = experts[i];
        if (e >= n_expert_) throw ModelError("expert " + std::to_string(e) + " requested of layer " + std::to_string(layer));
        const int64_t key = key_of(layer, e);
        freq_[static_cast<size_t>(key)]++;
        auto it = map_.find(key);
        flags_[i] = it != map_.end();
        if (it != map_.end()) {
            Slot& s = slots_[it->second];
            if (s.prefetched) flags_[i] |= 2;
            if (s.prefetched) stats_.prefetch_used++;
            s.prefetched = s.protect = s.to_tail = false;
            s.pins++;
            s.demanded = true;
            lru_remove(it->second);
            stats_.hits++;
            if (s.valid) ready_.push_back(it->second);
            continue;  // still loading: complete() queues it
        }
        stats_.misses++;
        int si = allocate_slot();
        if (si < 0) {
            deferred_.emplace_back(layer, e);
            continue;
        }
        claim(si, layer, e, true);
    }
    if (sink_) sink_->demand(layer, experts, flags_);
}

void StreamingExpertSource::claim(int si, uint32_t layer, uint32_t expert, bool demand) {
    Slot& s = slots_[si];
    s.pins = demand ? 1 : 0;
    s.demanded = demand;
    s.prefetched = s.protect = !demand;  // a prefetch is protected until its layer runs
    s.permanent = permanent_key_[static_cast<size_t>(key_of(layer, expert))];
    s.to_tail = demand && !s.permanent && insertion_.miss_to_tail(opt_.policy, usable_slots_);
    start_load(si, layer, expert, demand);
    // A prefetch takes its LRU place when issued, not when its read completes: the cache's order then does
    // not depend on I/O timing, so a routing trace replays to the same decisions (cache_sim.cpp). While
    // loading it cannot be evicted (allocate_slot skips loading slots).
    if (!demand && !s.permanent) lru_push_front(si);
}

void StreamingExpertSource::start_deferred() {
    while (!deferred_.empty()) {
        int si = allocate_slot();
        if (si < 0) return;
        auto [layer, e] = deferred_.front();
        deferred_.pop_front();
        claim(si, layer, e, true);
    }
}

std::pair<uint32_t, ExpertView> StreamingExpertSource::next_ready(uint32_t layer) {
    for (;;) {
        if (!ready_.empty()) {
            const int si = ready_.front();
            ready_.pop_front();
            Slot& s = slots_[si];
            if (!s.error.empty() && s.attempts == 0) {
                // Read once more before failing the request: the error may be that of a load issued before the
                // disk recovered (an abandoned request's, which this one picked up), or a transient one.
                s.attempts++;
                start_load(si, s.layer, s.expert, true);
                continue;
            }
            if (!s.error.empty()) {
                const std::string err = s.error;
                s.pins = 0;
                s.demanded = false;
                map_.erase(s.key);
                s.key = -1;
                s.error.clear();
                free_.push_back(si);
                throw ModelError(err);
            }
            if (s.layer != layer) throw ModelError("next_ready(" + std::to_string(layer) + ") got layer " + std::to_string(s.layer));
            return {s.expert, view(s)};
        }
        for (const auto& c : reader_->reap(false)) complete(c);  // synchronous (pread) completions, faults
        if (!ready_.empty()) continue;
        start_deferred();
        if (!deferred_.empty() && !reader_->has_pending()) {
            // Only protected prefetches stand in the way: give them up.
            for (auto& s : slots_) s.protect = false;
            start_deferred();
            if (!deferred_.empty() && !reader_->has_pending())
                throw ModelError("expert cache of " + std::to_string(slots_.size()) + " slots is full of pinned experts");
        }
        if (!reader_->has_pending()) {
            if (!ready_.empty()) continue;
            throw ModelError("next_ready(" + std::to_string(layer) + ") with nothing requested");
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto done = reader_->reap(true);
        stats_.wait_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
        for (const auto& c : done) complete(c);
    }
}

void StreamingExpertSource::release(uint32_t layer, uint32_t expert) {
    if (sink_) sink_->release(layer, expert);
    auto it = map_.find(key_of(layer, expert));
    if (it == map_.end()) return;
    Slot& s = slots_[it->second];
    if (s.pins > 0 && --s.pins == 0) {
        s.demanded = false;
        if (s.to_tail) lru_push_back(it->second);
        else if (!s.permanent) lru_push_front(it->second);
    }
    start_deferred();
}

void StreamingExpertSource::prefetch(uint32_t layer, std::span<const uint32_t> experts) {
    if (layer >= layers_.size() || !layers_[layer].gate) return;
    flags_.assign(experts.size(), 0);
    for (size_t i = 0; i < experts.size(); ++i) {
        const uint32_t e = experts[i];
        // Never let speculation crowd out demand reads: stop when the disk already has half of depth x read
        // size to do. Counted in bytes, not requests, so that the GGUF's three reads per expert and the
        // store's one get the same allowance.
        if (loading_bytes_ >= prefetch_cap()) break;
        if (e >= n_expert_ || map_.count(key_of(layer, e))) continue;
        if (free_.empty()) {
            const int v = victim();
            if (v < 0) break;
            if (!prefetch_admits(opt_.policy, freq_[static_cast<size_t>(key_of(layer, e))], freq_[static_cast<size_t>(slots_[v].key)])) continue;
        }
        int si = allocate_slot();
        if (si < 0) break;
        claim(si, layer, e, false);
        stats_.prefetch_issued++;
        flags_[i] = 1;
    }
    if (sink_) sink_->prefetch(layer, experts, flags_);
}

void StreamingExpertSource::abandon() {
    deferred_.clear();
    for (int si : ready_) {
        Slot& s = slots_[si];
        s.demanded = false;
        s.pins = 0;
        if (!s.error.empty()) {
            map_.erase(s.key);
            s.key = -1;
            s.error.clear();
            free_.push_back(si);
        } else if (!s.permanent) {
            lru_push_front(si);
        }
    }
    ready_.clear();
    for (size_t si = 0; si < slots_.size(); ++si) {
        Slot& s = slots_[si];
        if (s.pins > 0) {
            s.pins = 0;
            s.demanded = false;
            if (s.valid && !s.permanent) lru_push_front(static_cast<int>(si));
        }
        if (s.loading) {  // lands as a plain cached entry; a later request that wants it may retry it once
            s.demanded = false;
            s.attempts = 0;
        }
    }
}

}  // namespace moe
