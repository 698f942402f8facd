// Memory that the forward pass streams through once per token (weights, and a long context's KV cache): 2 MiB-
// aligned and offered to transparent huge pages (MADV_HUGEPAGE; hosts default to THP "madvise"), so that walking
// 100+ MiB per token costs one TLB entry per 2 MiB instead of per 4 KiB. Where THP is off, plain pages; same bytes.
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
        if (bytes != 0) p_ = allocate(bytes, min_align);
    }
    // Such memory (bytes > 0), released with std::free.
    static uint8_t* allocate(size_t bytes, size_t min_align = 64) {
        if (bytes > (SIZE_MAX >> 2)) throw std::bad_alloc();  // past any address space (and rounding up must not wrap)
        // Below half a huge page the alignment would only waste memory.
        const bool huge = bytes > kHuge / 2;
        const size_t align = huge ? kHuge : min_align;
        const size_t rounded = (bytes + align - 1) / align * align;
        auto* p = static_cast<uint8_t*>(std::aligned_alloc(align, rounded));
        if (!p) throw std::bad_alloc();
        // Advisory (refused, the pages stay plain), and only over whole huge pages of the size: a huge page
        // over the tail would make resident up to 2 MiB that nothing uses.
        if (huge && bytes >= kHuge) ::madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
        return p;
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

// The same memory behind a std::vector (the KV cache's rows: a decoding step reads every position's).
template <class T>
struct StreamedAllocator {
    using value_type = T;
    StreamedAllocator() = default;
    template <class U>
    StreamedAllocator(const StreamedAllocator<U>&) {}
    T* allocate(size_t n) { return reinterpret_cast<T*>(WeightMemory::allocate(n * sizeof(T), alignof(T) < 64 ? 64 : alignof(T))); }
    void deallocate(T* p, size_t) { std::free(p); }
    template <class U>
    bool operator==(const StreamedAllocator<U>&) const {
        return true;
    }
};

}  // namespace moe
