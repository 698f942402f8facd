#include "launch/diff.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace moe {
namespace {

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string line;
    while (std::getline(ss, line)) out.push_back(line);
    return out;
}

}  // namespace

std::string unified_diff(const std::string& a_text, const std::string& b_text, const std::string& a_label, const std::string& b_label) {
    if (a_text == b_text) return {};
    const auto a = lines_of(a_text), b = lines_of(b_text);
    const size_t n = a.size(), m = b.size();
    // LCS table: generated files are small (hundreds of lines), so O(n*m) is fine.
    std::vector<std::vector<uint32_t>> L(n + 1, std::vector<uint32_t>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;) L[i][j] = a[i] == b[j] ? L[i + 1][j + 1] + 1 : std::max(L[i + 1][j], L[i][j + 1]);
    struct Op {
        char kind;
        size_t ai, bi;
    };  // ' ', '-', '+'
    std::vector<Op> ops;
    size_t i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && a[i] == b[j]) ops.push_back({' ', i++, j++});
        else if (j < m && (i == n || L[i][j + 1] >= L[i + 1][j])) ops.push_back({'+', i, j++});
        else ops.push_back({'-', i++, j});
    }
    std::string out = "--- " + a_label + "\n+++ " + b_label + "\n";
    const size_t ctx = 3;
    size_t k = 0;
    while (k < ops.size()) {
        if (ops[k].kind == ' ') {
            ++k;
            continue;
        }
        // Hunk: from ctx lines before the change to ctx lines after the last change within 2*ctx.
        size_t start = k >= ctx ? k - ctx : 0, end = k;
        while (end < ops.size()) {
            if (ops[end].kind != ' ') {
                ++end;
                continue;
            }
            size_t run = end;
            while (run < ops.size() && ops[run].kind == ' ') ++run;
            if (run == ops.size() || run - end > 2 * ctx) {
                end = std::min(ops.size(), end + ctx);
                break;
            }
            end = run;
        }
        size_t a_start = ops[start].ai, b_start = ops[start].bi, a_len = 0, b_len = 0;
        std::string body;
        for (size_t t = start; t < end; ++t) {
            const Op& o = ops[t];
            if (o.kind != '+') ++a_len;
            if (o.kind != '-') ++b_len;
            body += o.kind;
            body += (o.kind == '+' ? b[o.bi] : a[o.ai]) + "\n";
        }
        out += "@@ -" + std::to_string(a_len ? a_start + 1 : a_start) + "," + std::to_string(a_len) + " +" +
               std::to_string(b_len ? b_start + 1 : b_start) + "," + std::to_string(b_len) + " @@\n" + body;
        k = end;
    }
    return out;
}

}  // namespace moe
