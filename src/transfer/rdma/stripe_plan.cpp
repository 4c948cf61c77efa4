#include "pdserve/transfer/rdma/stripe_plan.h"

#include <algorithm>
#include <string>

namespace pdserve::transfer::rdma {

namespace {
bool continues(const WriteOp& a, const WriteOp& b) {
  return a.local_region == b.local_region && a.remote_region == b.remote_region && a.local_offset + a.length == b.local_offset &&
         a.remote_offset + a.length == b.remote_offset;
}

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

int least_loaded(const std::vector<uint64_t>& bytes) {
  return static_cast<int>(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
}
}  // namespace

Result<StripePlan> plan_stripes(const std::vector<WriteOp>& writes, int nics, const StripeOptions& opt) {
  if (nics < 1) return invalid_argument("stripe plan needs at least one NIC");
  if (opt.alignment == 0 || (opt.alignment & (opt.alignment - 1)) != 0) return invalid_argument("alignment must be a power of two");
  if (opt.max_wr_bytes < opt.alignment || opt.max_wr_bytes % opt.alignment != 0)
    return invalid_argument("max_wr_bytes must be a positive multiple of alignment");
  if (opt.min_stripe_bytes == 0) return invalid_argument("min_stripe_bytes must be positive");
  std::vector<WriteOp> sorted = writes;
  for (const WriteOp& w : sorted) {
    if (w.length == 0) return invalid_argument("write of 0 bytes");
    if (w.remote_offset > UINT64_MAX - w.length || w.local_offset > UINT64_MAX - w.length)
      return invalid_argument("write offset + length wraps");
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const WriteOp& a, const WriteOp& b) {
    return a.remote_region != b.remote_region ? a.remote_region < b.remote_region : a.remote_offset < b.remote_offset;
  });
  std::vector<WriteOp> runs;
  for (const WriteOp& w : sorted) {
    if (!runs.empty() && runs.back().remote_region == w.remote_region && w.remote_offset < runs.back().remote_offset + runs.back().length)
      return invalid_argument("writes overlap at the destination: region " + std::to_string(w.remote_region) + " offset " +
                              std::to_string(w.remote_offset));
    if (!runs.empty() && continues(runs.back(), w))
      runs.back().length += w.length;
    else
      runs.push_back(w);
  }
  StripePlan plan;
  plan.nic_bytes.assign(nics, 0);
  plan.nic_wrs.assign(nics, 0);
  plan.runs = runs.size();
  std::vector<std::vector<WriteOp>> per_nic(nics);
  for (const WriteOp& run : runs) {
    plan.bytes += run.length;
    uint64_t share = run.length;
    if (nics > 1 && run.length >= 2 * opt.min_stripe_bytes) {
      const uint64_t ways = std::min<uint64_t>(nics, run.length / opt.min_stripe_bytes);
      share = round_up((run.length + ways - 1) / ways, opt.alignment);
    }
    share = std::min(share, opt.max_wr_bytes);
    for (uint64_t done = 0; done < run.length;) {
      const uint64_t n = std::min(share, run.length - done);
      WriteOp piece = run;
      piece.local_offset += done;
      piece.remote_offset += done;
      piece.length = n;
      const int nic = least_loaded(plan.nic_bytes);
      plan.nic_bytes[nic] += n;
      plan.nic_wrs[nic] += 1;
      per_nic[nic].push_back(piece);
      done += n;
    }
  }
  for (int nic = 0; nic < nics; ++nic)
    for (const WriteOp& op : per_nic[nic]) plan.wrs.push_back({nic, op});
  return plan;
}

}  // namespace pdserve::transfer::rdma
