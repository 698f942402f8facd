// libFuzzer target for prompt-cache records (serve --prompt-cache reads every file in a directory that other
// processes, crashes and full disks can leave anything in): any bytes must be refused with a reason or read
// within the sizes the engine's layout gives, never past the buffers the rows go to.
// The first input byte picks the layout (even: attention and indexer rows; odd: plus a recurrent state), the
// rest is the file. PROMPT_RECORD_FUZZ_WRITE_SEED=DIR writes a valid record of each layout and exits.
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/server/prompt_record.h"

namespace {

moe::RecordLayout layout(bool recurrent) {
    moe::RecordLayout l;
    l.identity = 42;
    l.k_row = {16, 0, 34};
    l.v_row = {16, 0, 0};
    l.ix_row = {0, 8, 0};
    l.recurrent_bytes = recurrent ? 24 : 0;
    l.seal();
    return l;
}

std::vector<uint8_t> valid_record(bool recurrent) {
    const moe::RecordLayout l = layout(recurrent);
    const std::vector<int32_t> tokens = {1, 5, 9, 200, 7};
    const std::vector<int32_t> positions = recurrent ? std::vector<int32_t>{2, 5} : std::vector<int32_t>{};
    std::vector<uint8_t> payload(tokens.size() * 4 + positions.size() * 4);
    std::memcpy(payload.data(), tokens.data(), tokens.size() * 4);
    if (!positions.empty()) std::memcpy(payload.data() + tokens.size() * 4, positions.data(), positions.size() * 4);
    for (size_t i = 0; i < tokens.size() * l.row_bytes() + positions.size() * l.recurrent_bytes; ++i) payload.push_back(static_cast<uint8_t>(i * 37));
    moe::RecordHeader h;
    h.identity = l.identity;
    h.layout = l.layout_hash;
    h.n_tokens = static_cast<uint32_t>(tokens.size());
    h.n_snapshots = static_cast<uint32_t>(positions.size());
    h.payload_bytes = payload.size();
    h.index_hash = moe::record_index_hash(tokens, positions);
    h.payload_hash = XXH3_64bits(payload.data(), payload.size());
    std::vector<uint8_t> file(moe::kRecordHeaderBytes);
    h.encode(file.data());
    file.insert(file.end(), payload.begin(), payload.end());
    return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool seeded = [] {
        if (const char* dir = std::getenv("PROMPT_RECORD_FUZZ_WRITE_SEED")) {
            for (int r = 0; r < 2; ++r) {
                std::vector<uint8_t> f = valid_record(r == 1);
                const int fd = ::memfd_create("seed", MFD_CLOEXEC);
                moe::RecordIndex index;
                bool foreign = false;
                if (::write(fd, f.data(), f.size()) != static_cast<ssize_t>(f.size()) || ::lseek(fd, 0, SEEK_SET) != 0 ||
                    !moe::read_record_index(fd, f.size(), layout(r == 1), index, foreign).empty())
                    std::abort();  // the seed must be a record the reader takes
                ::close(fd);
                f.insert(f.begin(), static_cast<uint8_t>(r));
                std::ofstream(std::string(dir) + (r ? "/recurrent" : "/attention"), std::ios::binary)
                    .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
            }
            std::exit(0);
        }
        return true;
    }();
    (void)seeded;
    if (size < 1) return 0;
    const moe::RecordLayout l = layout(data[0] & 1);
    const int fd = ::memfd_create("record", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (size > 1 && ::write(fd, data + 1, size - 1) != static_cast<ssize_t>(size - 1)) {
        ::close(fd);
        return 0;
    }
    ::lseek(fd, 0, SEEK_SET);
    moe::RecordIndex index;
    bool foreign = false;
    if (moe::read_record_index(fd, size - 1, l, index, foreign).empty()) {
        for (uint64_t keep : {uint64_t{0}, uint64_t{index.tokens.size() / 2}, uint64_t{index.tokens.size()}}) {
            ::lseek(fd, static_cast<off_t>(moe::kRecordHeaderBytes + (index.tokens.size() + index.snapshot_pos.size()) * 4), SEEK_SET);
            // Exactly keep rows of room per part and layer: AddressSanitizer catches a row too many.
            std::vector<std::vector<uint8_t>> room(9);
            const std::vector<uint64_t>* rows[3] = {&l.k_row, &l.v_row, &l.ix_row};
            for (int part = 0; part < 3; ++part)
                for (size_t layer = 0; layer < 3; ++layer) room[part * 3 + layer].resize(keep * (*rows[part])[layer]);
            std::vector<moe::RecordSnapshot> snapshots;
            moe::read_record_rows(
                fd, l, index, keep, [&](int part, size_t layer) { return room[part * 3 + layer].data(); }, snapshots);
        }
    }
    ::close(fd);
    return 0;
}
