#include "pdserve/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "pdserve/bench/metrics.h"

namespace pdserve::bench {
namespace {

constexpr double kPanelW = 440, kPanelH = 300, kLeft = 60, kRight = 20, kTop = 50, kBottom = 50;

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// A "nice" axis step (1, 2 or 5 times a power of ten) giving about `ticks` intervals.
double nice_step(double span, int ticks) {
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

void panel(std::ostringstream& o, const CdfPanel& p, double x0) {
  const double w = kPanelW - kLeft - kRight, h = kPanelH - kTop - kBottom;
  const double ax = x0 + kLeft, ay = kTop + h;  // axis origin (bottom-left)
  o << "<text x=\"" << x0 + kPanelW / 2 << "\" y=\"" << kTop - 12
    << "\" text-anchor=\"middle\" font-weight=\"bold\">" << xml_escape(p.title) << " CDF ("
    << xml_escape(p.unit) << "), n=" << p.values.size() << "</text>\n";
  o << "<rect x=\"" << ax << "\" y=\"" << kTop << "\" width=\"" << w << "\" height=\"" << h
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  if (p.values.empty()) {
    o << "<text x=\"" << ax + w / 2 << "\" y=\"" << kTop + h / 2
      << "\" text-anchor=\"middle\" fill=\"#888\">N/A (no samples)</text>\n";
    return;
  }
  std::vector<double> v = p.values;
  std::sort(v.begin(), v.end());
  const double step = nice_step(std::max(v.back(), 1e-12), 5);
  const double xmax = std::ceil(v.back() / step) * step;
  auto X = [&](double val) { return ax + val / xmax * w; };
  auto Y = [&](double frac) { return ay - frac * h; };
  for (double t = 0; t <= xmax * (1 + 1e-9); t += step) {
    o << "<line x1=\"" << X(t) << "\" y1=\"" << ay << "\" x2=\"" << X(t) << "\" y2=\"" << kTop
      << "\" stroke=\"#eee\"/>\n<text x=\"" << X(t) << "\" y=\"" << ay + 16 << "\" text-anchor=\"middle\">"
      << fmt(t) << "</text>\n";
  }
  for (int i = 0; i <= 4; ++i) {
    o << "<text x=\"" << ax - 6 << "\" y=\"" << Y(i / 4.0) + 4 << "\" text-anchor=\"end\">" << fmt(i / 4.0)
      << "</text>\n";
  }
  o << "<text x=\"" << ax + w / 2 << "\" y=\"" << ay + 36 << "\" text-anchor=\"middle\">" << xml_escape(p.title)
    << " (" << xml_escape(p.unit) << ")</text>\n";
  // Step CDF: after the i-th smallest value, (i+1)/n of the samples are at or below it.
  o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" << X(0) << "," << Y(0);
  const double n = static_cast<double>(v.size());
  for (size_t i = 0; i < v.size(); ++i) o << " " << X(v[i]) << "," << Y(i / n) << " " << X(v[i]) << "," << Y((i + 1) / n);
  o << " " << X(xmax) << "," << Y(1) << "\"/>\n";
  const double p50 = percentile(v, 50), p95 = percentile(v, 95);
  for (auto [label, val, color, dy] : {std::tuple{"P50", p50, "#2ca02c", 14.0}, std::tuple{"P95", p95, "#d62728", 28.0}}) {
    o << "<line x1=\"" << X(val) << "\" y1=\"" << ay << "\" x2=\"" << X(val) << "\" y2=\"" << kTop
      << "\" stroke=\"" << color << "\" stroke-dasharray=\"4 3\"/>\n<text x=\"" << X(val) + 3 << "\" y=\""
      << kTop + dy << "\" fill=\"" << color << "\">" << label
      << " " << fmt(val) << "</text>\n";
  }
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_cdf_svg(const std::string& title, const std::vector<CdfPanel>& panels) {
  std::ostringstream o;
  const double width = kPanelW * static_cast<double>(std::max<size_t>(1, panels.size()));
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << kPanelH
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << width / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">" << xml_escape(title)
    << "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) panel(o, panels[i], kPanelW * static_cast<double>(i));
  o << "</svg>\n";
  return o.str();
}

}  // namespace pdserve::bench
