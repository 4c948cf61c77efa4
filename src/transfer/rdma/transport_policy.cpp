#include "pdserve/transfer/rdma/transport_policy.h"

namespace pdserve::transfer::rdma {

namespace {
std::string join_reports(const std::vector<PortReport>& reports, const DeviceList& here) {
  std::string s;
  for (const PortReport& r : reports) s += (s.empty() ? "" : "; ") + r.describe(here);
  return s;
}
std::string join_lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += (s.empty() ? "" : "; ") + l;
  return s;
}
}  // namespace

Result<TransportDecision> decide_transport(const std::string& backend, const std::vector<NicName>& nics,
                                           const std::vector<PortReport>& reports, const DeviceList& here,
                                           bool data_path_built, bool run_on_real_nics) {
  if (backend != "tcp" && backend != "rdma" && backend != "auto")
    return invalid_argument("transfer_backend must be tcp, rdma or auto (got '" + backend + "')");
  if (reports.size() != nics.size()) return invalid_argument("one probe report per configured NIC expected");
  const std::string seen = describe_devices(here);
  if (backend == "tcp") return TransportDecision{"tcp", "tcp (asked for; " + seen + ")"};
  const std::vector<std::string> problems = nic_problems(reports, here);
  if (backend == "rdma") {
    const std::string never = "; pdserve never falls back to TCP on its own: fix the NICs or pass --transfer-backend tcp";
    if (nics.empty()) return Status(ErrorCode::kUnavailable, "--transfer-backend rdma needs --rdma-nics (" + seen + ")" + never);
    if (!problems.empty()) return Status(ErrorCode::kUnavailable, "--transfer-backend rdma: " + join_lines(problems) + never);
    if (!data_path_built)
      return Status(ErrorCode::kUnavailable, "--transfer-backend rdma: every NIC is ready (" + join_reports(reports, here) +
                                                 ") but this build's RDMA data path is not finished (docs/disaggregation.md, RDMA)" + never);
    return TransportDecision{"rdma", "rdma (asked for; " + join_reports(reports, here) +
                                         (run_on_real_nics ? ")" : "; never run on a real NIC before this deployment)")};
  }
  if (nics.empty()) return TransportDecision{"tcp", "tcp (auto: no --rdma-nics configured; " + seen + ")"};
  if (!problems.empty()) return TransportDecision{"tcp", "tcp (auto: " + join_lines(problems) + ")"};
  if (!data_path_built)
    return TransportDecision{"tcp", "tcp (auto: every NIC is ready (" + join_reports(reports, here) +
                                        ") but this build's RDMA data path is not finished)"};
  if (!run_on_real_nics)
    return TransportDecision{"tcp", "tcp (auto: every NIC is ready (" + join_reports(reports, here) +
                                        ") but pdserve's RDMA data path has never run on a real NIC; pass --transfer-backend rdma to use it)"};
  return TransportDecision{"rdma", "rdma (auto: every NIC is ready: " + join_reports(reports, here) + ")"};
}

}  // namespace pdserve::transfer::rdma
