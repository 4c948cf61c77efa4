// A self-contained SVG of the TTFT and TPOT distributions (empirical CDFs with P50 / P95
// markers), written by hand so the bench needs no plotting library.
#pragma once

#include <string>
#include <vector>

namespace pdserve::bench {

struct CdfPanel {
  std::string title;  // "TTFT"
  std::string unit;   // "s"
  std::vector<double> values;  // in `unit`; empty draws "N/A"
};

std::string render_cdf_svg(const std::string& title, const std::vector<CdfPanel>& panels);

// Escapes &, <, >, " for SVG text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace pdserve::bench
