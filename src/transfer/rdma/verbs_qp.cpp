#include "verbs_qp.h"

#include <arpa/inet.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>

namespace pdserve::transfer::rdma {

namespace {
Status verbs_error(const std::string& what, int err) {
  return Status(ErrorCode::kUnavailable, what + ": " + std::strerror(err ? err : EIO));
}

ibv_mtu to_ibv_mtu(uint16_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}
}  // namespace

Result<std::unique_ptr<VerbsQp>> VerbsQp::create(ibv_context* ctx, ibv_pd* pd, int depth, int recv_depth, const PortAddress& where) {
  std::unique_ptr<VerbsQp> q(new VerbsQp());
  q->where_ = where;
  std::random_device rd;
  q->psn_ = rd() & 0xffffff;
  q->cq_ = ibv_create_cq(ctx, depth, nullptr, nullptr, 0);
  if (!q->cq_) return verbs_error("ibv_create_cq", errno);
  q->recv_cq_ = ibv_create_cq(ctx, std::max(1, recv_depth), nullptr, nullptr, 0);
  if (!q->recv_cq_) return verbs_error("ibv_create_cq (receives)", errno);
  ibv_qp_init_attr init{};
  init.send_cq = q->cq_;
  init.recv_cq = q->recv_cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;  // every write completes: the poster counts them
  init.cap.max_send_wr = static_cast<uint32_t>(depth);
  init.cap.max_recv_wr = static_cast<uint32_t>(std::max(1, recv_depth));
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  q->qp_ = ibv_create_qp(pd, &init);
  if (!q->qp_) return verbs_error("ibv_create_qp", errno);
  return q;
}

VerbsQp::~VerbsQp() {
  if (qp_) ibv_destroy_qp(qp_);
  if (recv_cq_) ibv_destroy_cq(recv_cq_);
  if (cq_) ibv_destroy_cq(cq_);
}

QpEndpoint VerbsQp::endpoint() const {
  QpEndpoint e;
  e.qpn = qp_->qp_num;
  e.psn = psn_;
  e.lid = where_.lid;
  e.mtu = where_.mtu;
  e.gid_index = static_cast<uint8_t>(where_.gid.index);
  e.gid = where_.gid.gid;
  return e;
}

Status VerbsQp::connect(const QpEndpoint& remote) {
  const uint8_t port = where_.port;
  const QpEndpoint local = endpoint();
  const bool roce = where_.roce;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return verbs_error("ibv_modify_qp to INIT", rc);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = to_ibv_mtu(std::min(local.mtu, remote.mtu));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = port;
  if (roce) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    a.ah_attr.grh.sgid_index = local.gid_index;
    a.ah_attr.grh.hop_limit = 64;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return verbs_error("ibv_modify_qp to RTR (peer QPN " + std::to_string(remote.qpn) + ")", rc);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = local.psn;
  a.timeout = 14;   // 4.096 us x 2^14 = 67 ms per retry
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                          IBV_QP_MAX_QP_RD_ATOMIC))
    return verbs_error("ibv_modify_qp to RTS", rc);
  return Status::ok();
}

Status VerbsQp::post(const RdmaWrite& w) {
  ibv_sge sge{};
  sge.addr = w.local_addr;
  sge.length = w.length;
  sge.lkey = w.lkey;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = w.wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = w.imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (w.imm) wr.imm_data = htonl(*w.imm);
  wr.wr.rdma.remote_addr = w.remote_addr;
  wr.wr.rdma.rkey = w.rkey;
  if (int rc = ibv_post_send(qp_, &wr, &bad)) return verbs_error("ibv_post_send", rc);
  return Status::ok();
}

int VerbsQp::poll(WorkCompletion* out, int max) {
  ibv_wc wc[32];
  const int n = ibv_poll_cq(cq_, std::min(max, 32), wc);
  if (n < 0) {  // the CQ itself failed: report it as one error completion
    out[0] = {0, false, "ibv_poll_cq failed"};
    return max > 0 ? 1 : 0;
  }
  for (int i = 0; i < n; ++i)
    out[i] = {wc[i].wr_id, wc[i].status == IBV_WC_SUCCESS, wc[i].status == IBV_WC_SUCCESS ? "" : ibv_wc_status_str(wc[i].status)};
  return n;
}

Status VerbsQp::post_recv() {
  // No scatter list: a write-with-immediate places its bytes by RDMA; the receive only
  // carries the immediate.
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.num_sge = 0;
  if (int rc = ibv_post_recv(qp_, &wr, &bad)) return verbs_error("ibv_post_recv", rc);
  return Status::ok();
}

int VerbsQp::poll_recv(RecvCompletion* out, int max) {
  ibv_wc wc[16];
  const int n = ibv_poll_cq(recv_cq_, std::min(max, 16), wc);
  if (n < 0) {
    if (max > 0) out[0] = {0, false, "ibv_poll_cq (receives) failed"};
    return max > 0 ? 1 : 0;
  }
  for (int i = 0; i < n; ++i) {
    const bool ok = wc[i].status == IBV_WC_SUCCESS && (wc[i].wc_flags & IBV_WC_WITH_IMM);
    out[i] = {ok ? ntohl(wc[i].imm_data) : 0, ok, ok ? "" : (wc[i].status == IBV_WC_SUCCESS ? "receive without an immediate" : ibv_wc_status_str(wc[i].status))};
  }
  return n;
}

void VerbsQp::set_error() {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(qp_, &a, IBV_QP_STATE);  // nothing more lands through this QP
}

Result<MrPtr> register_region(ibv_pd* pd, const MemoryRegion& region) {
  if (region.gpu) return internal_error("region '" + region.name + "' is GPU memory: register_gpu_region registers it");
  MrPtr mr(ibv_reg_mr(pd, region.base, region.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (!mr)
    return verbs_error("ibv_reg_mr of region '" + region.name + "' (" + std::to_string(region.size) +
                           " bytes; check `ulimit -l` and the container's IPC_LOCK)",
                       errno);
  return mr;
}

}  // namespace pdserve::transfer::rdma
