// COMPILED IN CI, NEVER RUN (see verbs_fabric.h).
#include "pdserve/transfer/rdma/verbs_fabric.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include "pdserve/transfer/rdma/nic_probe.h"
#include "verbs_qp.h"

namespace pdserve::transfer::rdma {

namespace {

struct Nic {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  PortAddress where;
  std::string name;
};

class VerbsRegistration final : public Registration {
 public:
  std::vector<MrPtr> mrs;  // one per NIC
  MrKeys k;                // lkeys
  std::vector<uint32_t> r;
  const MrKeys& keys() const override { return k; }
  std::vector<uint32_t> rkeys() const override { return r; }
};

class VerbsFabric final : public Fabric {
 public:
  ~VerbsFabric() override {
    for (Nic& n : nics_) {
      if (n.pd) ibv_dealloc_pd(n.pd);
      if (n.ctx) ibv_close_device(n.ctx);
    }
  }
  int nics() const override { return static_cast<int>(nics_.size()); }
  std::string describe() const override {
    std::string s = "verbs(";
    for (const Nic& n : nics_) s += (s.size() > 6 ? " " : "") + n.name;
    return s + ")";
  }
  Result<std::string> gpu_registration() override {
    PDS_ASSIGN_OR_RETURN(GpuRegChoice c, gpu_choice());
    return c.reason;
  }
  Result<std::unique_ptr<Registration>> register_memory(const MemoryRegion& region) override {
    std::optional<GpuRegPath> gpu_path;
    if (region.gpu) {
      PDS_ASSIGN_OR_RETURN(GpuRegChoice c, gpu_choice());
      gpu_path = c.path;
    }
    auto r = std::make_unique<VerbsRegistration>();
    r->k.addr = reinterpret_cast<uint64_t>(region.base);
    r->k.size = region.size;
    for (Nic& n : nics_) {
      PDS_ASSIGN_OR_RETURN(MrPtr mr, gpu_path ? register_gpu_region(n.pd, region, *gpu_path) : register_region(n.pd, region));
      r->k.keys.push_back(mr->lkey);
      r->r.push_back(mr->rkey);
      r->mrs.push_back(std::move(mr));
    }
    return std::unique_ptr<Registration>(std::move(r));
  }
  Result<std::unique_ptr<QueuePair>> create_qp(int nic, int depth, int recv_depth) override {
    Nic& n = nics_.at(nic);
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<VerbsQp> qp, VerbsQp::create(n.ctx, n.pd, depth, recv_depth, n.where));
    return std::unique_ptr<QueuePair>(std::move(qp));
  }

  std::vector<Nic> nics_;

 private:
  // Probed once, at the first question (capabilities() or a GPU region).
  Result<GpuRegChoice> gpu_choice() {
    std::lock_guard lk(gpu_mu_);
    if (!gpu_) gpu_ = choose_gpu_registration(probe_gpu_registration());
    return *gpu_;
  }
  std::mutex gpu_mu_;
  std::optional<Result<GpuRegChoice>> gpu_;
};

}  // namespace

Result<std::unique_ptr<Fabric>> make_verbs_fabric(const std::vector<NicName>& nics, int gid_index) {
  if (nics.empty()) return invalid_argument("the verbs fabric needs at least one NIC (--rdma-nics)");
  const DeviceList here = list_devices();
  const std::vector<PortReport> reports = probe_nics(nics, gid_index);
  const std::vector<std::string> problems = nic_problems(reports, here);
  if (!problems.empty()) return Status(ErrorCode::kUnavailable, "rdma: " + problems.front());
  auto f = std::make_unique<VerbsFabric>();
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return Status(ErrorCode::kUnavailable, std::string("ibv_get_device_list: ") + std::strerror(errno ? errno : ENODEV));
  Status st;
  for (const PortReport& r : reports) {
    Nic n;
    n.name = r.nic.to_string();
    for (int i = 0; i < count && !n.ctx; ++i)
      if (r.nic.device == ibv_get_device_name(list[i])) n.ctx = ibv_open_device(list[i]);
    if (!n.ctx) {
      st = Status(ErrorCode::kUnavailable, "ibv_open_device " + n.name + ": " + std::strerror(errno ? errno : ENODEV));
      break;
    }
    n.pd = ibv_alloc_pd(n.ctx);
    if (!n.pd) {
      ibv_close_device(n.ctx);
      st = Status(ErrorCode::kUnavailable, "ibv_alloc_pd " + n.name + ": " + std::strerror(errno ? errno : ENOMEM));
      break;
    }
    n.where.port = static_cast<uint8_t>(r.nic.port);
    n.where.lid = r.lid;
    n.where.mtu = static_cast<uint16_t>(r.active_mtu > 0 ? r.active_mtu : 1024);
    n.where.gid = *r.gid;
    n.where.roce = r.link == LinkLayer::kEthernet;
    f->nics_.push_back(n);
  }
  ibv_free_device_list(list);
  if (!st.is_ok()) return st;
  return std::unique_ptr<Fabric>(std::move(f));
}

}  // namespace pdserve::transfer::rdma
