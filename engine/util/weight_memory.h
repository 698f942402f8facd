// Memory for weights that the forward pass streams through once per token: 2 MiB-aligned and offered to
// transparent huge pages (MADV_HUGEPAGE; hosts default to THP "madvise"), so that walking 100+ MiB of weights
// per token costs one TLB entry per 2 MiB instead of per 4 KiB. Where THP is off, plain pages; same bytes.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace moe {

class WeightMemory {
public:
    static constexpr size_t kHuge = size_t{2} << 20;
    WeightMemory() = default;
    // `min_align`: at least this alignment whatever the size (4096 for O_DIRECT destinations).
    explicit WeightMemory(size_t bytes, size_t min_align = 64) : size_(bytes) {
        if (bytes == 0) return;
        // Below half a huge page the alignment would only waste memory.
        const bool huge = bytes > kHuge / 2;
        const size_t align = huge ? kHuge : min_align;
        const size_t rounded = (bytes + align - 1) / align * align;
        p_ = static_cast<uint8_t*>(std::aligned_alloc(align, rounded));
        if (!p_) throw std::bad_alloc();
        if (huge) ::madvise(p_, rounded, MADV_HUGEPAGE);  // advisory: refused, the pages stay plain
    }
    ~WeightMemory() { std::free(p_); }
    WeightMemory(WeightMemory&& o) noexcept : p_(o.p_), size_(o.size_) {
        o.p_ = nullptr;
        o.size_ = 0;
    }
    WeightMemory& operator=(WeightMemory&& o) noexcept {
        if (this != &o) {
            std::free(p_);
            p_ = o.p_;
            size_ = o.size_;
            o.p_ = nullptr;
            o.size_ = 0;
        }
        return *this;
    }
    WeightMemory(const WeightMemory&) = delete;
    WeightMemory& operator=(const WeightMemory&) = delete;

    uint8_t* data() { return p_; }
    const uint8_t* data() const { return p_; }
    size_t size() const { return size_; }

private:
    uint8_t* p_ = nullptr;
    size_t size_ = 0;
};

}  // namespace moe
