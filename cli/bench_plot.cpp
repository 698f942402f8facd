#include "cli/bench_plot.h"

#include <algorithm>
#include <cstdio>

namespace moe::cli {

namespace {

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
    return o;
}

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4g", v);
    return b;
}

struct Series {
    std::vector<double> x, y;
};

// One panel: a curve, axes with the maximum and the time span labelled, an optional dashed reference line.
std::string panel(double top, const std::string& label, const Series& s, double ref, const std::string& ref_label, double y_max_floor) {
    const double left = 60, width = 620, height = 150;
    double t_max = 1e-9, y_max = y_max_floor;
    for (size_t i = 0; i < s.x.size(); ++i) {
        t_max = std::max(t_max, s.x[i]);
        y_max = std::max(y_max, s.y[i]);
    }
    y_max = std::max(y_max, ref) * 1.1;
    if (!(y_max > 0)) y_max = 1;
    auto X = [&](double t) { return left + width * t / t_max; };
    auto Y = [&](double v) { return top + height - height * v / y_max; };
    std::string o = "<text x=\"" + num(left) + "\" y=\"" + num(top - 6) + "\" font-weight=\"bold\">" + esc(label) + "</text>\n";
    o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" fill=\"#fff\" stroke=\"#c4c7cc\"/>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + 10) + "\" text-anchor=\"end\">" + num(y_max) + "</text>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + height) + "\" text-anchor=\"end\">0</text>\n";
    o += "<text x=\"" + num(left + width) + "\" y=\"" + num(top + height + 14) + "\" text-anchor=\"end\">" + num(t_max) + " s</text>\n";
    if (!s.x.empty()) {
        o += "<polyline fill=\"none\" stroke=\"#0b57d0\" stroke-width=\"2\" points=\"";
        for (size_t i = 0; i < s.x.size(); ++i) o += num(X(s.x[i])) + "," + num(Y(s.y[i])) + " ";
        o += "\"/>\n";
    }
    if (ref > 0) {
        o += "<line class=\"reference\" x1=\"" + num(left) + "\" x2=\"" + num(left + width) + "\" y1=\"" + num(Y(ref)) + "\" y2=\"" + num(Y(ref)) +
             "\" stroke=\"#a50e0e\" stroke-dasharray=\"6 4\"/>\n";
        o += "<text x=\"" + num(left + width - 4) + "\" y=\"" + num(Y(ref) - 4) + "\" text-anchor=\"end\" fill=\"#a50e0e\">" + esc(ref_label) +
             "</text>\n";
    }
    return o;
}

}  // namespace

std::string render_bench_svg(const std::vector<BenchPoint>& p, double fio_bytes_per_s, const std::string& title, int window) {
    Series tps, gbps, hit;
    for (size_t i = 1; i < p.size(); ++i) {
        const size_t a = i >= static_cast<size_t>(window) ? i - static_cast<size_t>(window) : 0;
        const double dt = p[i].t - p[a].t;
        if (dt <= 0) continue;
        tps.x.push_back(p[i].t);
        tps.y.push_back(static_cast<double>(i - a) / dt);
        gbps.x.push_back(p[i].t);
        gbps.y.push_back((p[i].bytes_read - p[a].bytes_read) / dt / 1e9);
        const double looks = p[i].lookups - p[a].lookups;
        if (looks > 0) {
            hit.x.push_back(p[i].t);
            hit.y.push_back((p[i].hits - p[a].hits) / looks);
        }
    }
    std::string o =
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"640\" viewBox=\"0 0 720 640\" font-family=\"sans-serif\" font-size=\"12\">\n";
    o += "<title>" + esc(title) + "</title>\n<rect width=\"720\" height=\"640\" fill=\"#f3f4f6\"/>\n";
    o += "<text x=\"60\" y=\"22\" font-size=\"14\" font-weight=\"bold\">" + esc(title) + "</text>\n";
    o += panel(60, "generation, tok/s (" + std::to_string(window) + "-token window)", tps, 0, "", 0);
    o += panel(255, "expert reads, GB/s", gbps, fio_bytes_per_s / 1e9, "fio " + num(fio_bytes_per_s / 1e9) + " GB/s", 0);
    o += panel(450, "expert cache hit rate", hit, 0, "", 1);
    return o + "</svg>\n";
}

std::string render_hit_rate_svg(const std::vector<HitRateCurve>& curves, const std::string& title) {
    const double left = 70, top = 40, width = 600, height = 300;
    double x_max = 1;
    for (const auto& c : curves)
        for (const auto& [x, y] : c.points) x_max = std::max(x_max, x);
    auto X = [&](double b) { return left + width * b / x_max; };
    auto Y = [&](double h) { return top + height - height * h; };
    static const char* colors[] = {"#0b57d0", "#137333", "#b06000", "#8430ce", "#a50e0e"};
    std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(left + width + 180) + "\" height=\"" + num(top + height + 50) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    o += "<text x=\"" + num(left) + "\" y=\"20\" font-weight=\"bold\">" + esc(title) + "</text>\n";
    o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" fill=\"#fff\" stroke=\"#c4c7cc\"/>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + 10) + "\" text-anchor=\"end\">100%</text>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(top + height) + "\" text-anchor=\"end\">0%</text>\n";
    o += "<text x=\"" + num(left + width) + "\" y=\"" + num(top + height + 16) + "\" text-anchor=\"end\">" + num(x_max / (1 << 20)) + " MiB</text>\n";
    o += "<text x=\"" + num(left + width / 2) + "\" y=\"" + num(top + height + 32) + "\" text-anchor=\"middle\">expert cache budget</text>\n";
    for (size_t i = 0; i < curves.size(); ++i) {
        const auto& c = curves[i];
        const std::string color = colors[i % 5];
        o += "<polyline class=\"curve\" data-name=\"" + esc(c.name) + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"" +
             (c.bound ? " stroke-dasharray=\"6 4\"" : "") + " points=\"";
        for (const auto& [x, y] : c.points) o += num(X(x)) + "," + num(Y(y)) + " ";
        o += "\"/>\n";
        o += "<text x=\"" + num(left + width + 10) + "\" y=\"" + num(top + 14 + 18 * static_cast<double>(i)) + "\" fill=\"" + color + "\">" +
             esc(c.name) + "</text>\n";
    }
    return o + "</svg>\n";
}

}  // namespace moe::cli
