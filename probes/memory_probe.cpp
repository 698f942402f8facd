// RAM, swap, transparent huge pages and hugepages from /proc/meminfo and sysfs.
#include <sstream>

#include "probes/probes.h"

namespace moe {

MemoryFacts probe_memory(const FsRoot& fs) {
    MemoryFacts m;
    auto meminfo = fs.read("/proc/meminfo");
    const std::string src = "/proc/meminfo";
    if (meminfo) {
        std::istringstream in(*meminfo);
        std::string key;
        uint64_t val;
        std::string unit;
        std::string line;
        while (std::getline(in, line)) {
            std::istringstream ls(line);
            if (!(ls >> key >> val)) continue;
            unit.clear();
            ls >> unit;
            uint64_t bytes = unit == "kB" ? val * 1024 : val;
            if (key == "MemTotal:") m.total_bytes = {bytes, src};
            else if (key == "MemAvailable:") m.available_bytes = {bytes, src};
            else if (key == "SwapTotal:") m.swap_total_bytes = {bytes, src};
            else if (key == "SwapFree:") m.swap_free_bytes = {bytes, src};
            else if (key == "HugePages_Total:") m.hugepages_total = {val, src};
            else if (key == "Hugepagesize:") m.hugepage_size_bytes = {bytes, src};
        }
    }
    for (auto* f : {&m.total_bytes, &m.available_bytes, &m.swap_total_bytes, &m.swap_free_bytes, &m.hugepages_total, &m.hugepage_size_bytes})
        if (!f->value) f->source = meminfo ? "not in /proc/meminfo" : "unknown: /proc/meminfo unreadable";
    const std::string thp = "/sys/kernel/mm/transparent_hugepage/enabled";
    if (auto s = fs.read(thp)) {
        auto a = s->find('['), b = s->find(']');
        if (a != std::string::npos && b != std::string::npos && b > a) m.thp_enabled = {s->substr(a + 1, b - a - 1), thp};
        else m.thp_enabled.source = thp + " has no [selected] mode: '" + *s + "'";
    } else {
        m.thp_enabled.source = "unknown: " + thp + " unreadable (kernel without THP?)";
    }
    return m;
}

}  // namespace moe
