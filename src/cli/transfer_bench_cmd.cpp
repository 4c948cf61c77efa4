// pdserve transfer-bench: what one Kimi-K3 request costs the transfer engine. One process
// is both prefill (sender) and decode (receiver); each request is a room laid out by the real
// transfer plan (page runs per MLA layer, the KDA state, the aux row, a notification), granted
// on the receiver exactly as decode grants it, submitted as one batch and waited for.
// Prints bytes per request and GB/s per NIC against a line rate (docs/perf.md, "Transfer").
// Exit status: 0 measured; 1 a transfer failed or landed wrong bytes; 2 nothing measured.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "commands.h"
#include "pdserve/disagg/transfer_plan.h"
#include "pdserve/transfer/rdma/rdma_transport.h"
#include "pdserve/transfer/rdma/transport_policy.h"
#include "pdserve/transfer/rdma/verbs_fabric.h"
#include "pdserve/transfer/tcp_transport.h"

namespace pdserve::cli {
namespace {

namespace rdma = transfer::rdma;
using transfer::Clock;

struct BenchOptions {
  std::string backend = "tcp";
  std::vector<std::string> nics;
  int gid_index = rdma::kAutoGidIndex;
  int64_t tokens = 16384;
  int requests = 8;
  int streams = 4;
  int64_t page_size = 64;
  int64_t decode_run_pages = 16;  // decode's pages come in runs this long (a reused pool is fragmented)
  double line_rate_gbps = 50;     // one 400 Gb/s NIC
  std::string kv_cache_dtype = "float32";  // the MLA pages' dtype (kv_cache_dtype)
};

// Kimi-K3's transferred shapes (shared/docs/kimi-k3.md): 24 MLA layers of 576 values per
// token, 69 KDA layers of 96 heads x 128 with a conv tail of 3.
disagg::KvLayout k3_layout(const std::string& role, int64_t page_size, int64_t num_pages, const std::string& kv_dtype) {
  disagg::KvLayout l;
  l.role = role;
  l.kv_dtype = kv_dtype;
  l.page_size = page_size;
  l.mla_layers = 24;
  l.entry_dim = 576;
  l.num_pages = num_pages;
  l.kda = {69, 96, 128, 3};
  l.num_slots = 1;
  return l;
}

// What production moves per request: bf16 latent and conv tail, fp32 recurrent state.
uint64_t production_bytes(int64_t tokens) {
  return 24ull * 576 * 2 * static_cast<uint64_t>(tokens) + 69ull * (3ull * 12288 * 3 * 2 + 96ull * 128 * 128 * 4);
}

struct Buffers {
  std::vector<uint8_t> kv, state, aux;
};

Status register_side(transfer::Transport& t, Buffers& b) {
  PDS_RETURN_IF_ERROR(t.register_region({disagg::kv_region(0), b.kv.data(), b.kv.size(), "mla_pages", false}));
  PDS_RETURN_IF_ERROR(t.register_region({disagg::state_region(0), b.state.data(), b.state.size(), "kda_state", false}));
  return t.register_region({disagg::kAuxRegion, b.aux.data(), b.aux.size(), "aux", false});
}

Result<std::unique_ptr<transfer::Transport>> make_backend(const std::string& backend, const BenchOptions& o, uint16_t port) {
  if (backend == "rdma") {  // the policy allowed it: asked for, every NIC usable
    PDS_ASSIGN_OR_RETURN(std::vector<rdma::NicName> nics, rdma::parse_nic_list(o.nics));
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<rdma::Fabric> fabric, rdma::make_verbs_fabric(nics, o.gid_index));
    rdma::RdmaTransportConfig cfg;
    cfg.control.listen_port = port;
    cfg.rdma.gid_index = o.gid_index;
    return rdma::make_rdma_transport(cfg, std::move(fabric));
  }
  if (backend != "tcp") return internal_error("no transport for backend " + backend);
  transfer::TcpConfig cfg;
  cfg.listen_port = port;
  cfg.streams_per_peer = o.streams;
  return transfer::make_tcp_transport(cfg);
}

int run(const BenchOptions& o) {
  auto nics = rdma::parse_nic_list(o.nics);
  if (!nics.is_ok()) return std::cerr << "transfer-bench: " << nics.status().message() << "\n", 2;
  const rdma::DeviceList here = rdma::list_devices();
  const auto reports = o.backend == "tcp" ? std::vector<rdma::PortReport>{} : rdma::probe_nics(*nics, o.gid_index);
  auto choice = rdma::decide_transport(o.backend, o.backend == "tcp" ? std::vector<rdma::NicName>{} : *nics, reports, here);
  if (!choice.is_ok()) return std::cerr << "transfer-bench: " << choice.status().message() << "\n", 2;
  if (o.tokens < 1 || o.requests < 1 || o.page_size < 1 || o.decode_run_pages < 1)
    return std::cerr << "transfer-bench: --tokens, --requests, --page-size and --decode-run-pages must be positive\n", 2;
  const int n_nics = choice->backend == "rdma" ? static_cast<int>(nics->size()) : 1;

  const int64_t pages = (o.tokens + o.page_size - 1) / o.page_size;
  std::vector<int32_t> src_pages(pages), dst_pages(pages);
  for (int64_t i = 0; i < pages; ++i) {
    src_pages[i] = static_cast<int32_t>(i);
    dst_pages[i] = static_cast<int32_t>(i + i / o.decode_run_pages);  // one free page between runs
  }
  const disagg::KvLayout src = k3_layout("prefill", o.page_size, pages, o.kv_cache_dtype);
  const disagg::KvLayout dst = k3_layout("decode", o.page_size, dst_pages.back() + 1, o.kv_cache_dtype);
  const uint64_t page_bytes = static_cast<uint64_t>(src.page_bytes());
  const uint64_t slot_bytes = static_cast<uint64_t>(src.slot_floats_per_rank()) * sizeof(float);
  Buffers sb{std::vector<uint8_t>(src.mla_layers * src.num_pages * page_bytes), std::vector<uint8_t>(slot_bytes),
             std::vector<uint8_t>(sizeof(disagg::AuxRow))};
  Buffers db{std::vector<uint8_t>(dst.mla_layers * dst.num_pages * page_bytes), std::vector<uint8_t>(slot_bytes),
             std::vector<uint8_t>(sizeof(disagg::AuxRow))};
  for (size_t i = 0; i < sb.kv.size(); ++i) sb.kv[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t i = 0; i < sb.state.size(); ++i) sb.state[i] = static_cast<uint8_t>(i * 29 + 3);

  std::vector<transfer::WriteOp> writes = disagg::page_writes(src, dst, src_pages, dst_pages, 0, pages);
  auto state = disagg::state_writes(src, dst, 0, 0);
  if (!state.is_ok()) return std::cerr << "transfer-bench: " << state.status().message() << "\n", 2;
  writes.insert(writes.end(), state->begin(), state->end());
  writes.push_back(disagg::aux_write(0, 0));
  const uint64_t expect = disagg::room_bytes(src, dst, pages);

  auto receiver = make_backend(choice->backend, o, 0);
  auto sender = make_backend(choice->backend, o, 0);
  if (!receiver.is_ok() || !sender.is_ok())
    return std::cerr << "transfer-bench: " << (receiver.is_ok() ? sender.status() : receiver.status()).message() << "\n", 2;
  transfer::Transport& rx = **receiver;
  transfer::Transport& tx = **sender;
  Status st = register_side(rx, db);
  if (st.is_ok()) st = register_side(tx, sb);
  auto peer = st.is_ok() ? tx.open_peer(rx.local_address()) : Result<transfer::PeerId>(st);
  if (!peer.is_ok()) return std::cerr << "transfer-bench: " << peer.status().message() << "\n", 2;

  std::printf("transfer-bench: backend %s\n", choice->reason.c_str());
  std::printf("request: %lld tokens = %lld pages of %lld; %zu writes (decode pages in runs of %lld); %d NIC(s) / stream set(s)\n",
              static_cast<long long>(o.tokens), static_cast<long long>(pages), static_cast<long long>(o.page_size), writes.size(),
              static_cast<long long>(o.decode_run_pages), n_nics);
  std::printf("bytes per request: %llu (%s MLA pages: MLA %llu + fp32 KDA %llu + aux %zu); production bf16/fp32: %llu\n",
              static_cast<unsigned long long>(expect), src.kv_dtype.c_str(), static_cast<unsigned long long>(expect - slot_bytes - sizeof(disagg::AuxRow)),
              static_cast<unsigned long long>(slot_bytes), sizeof(disagg::AuxRow), static_cast<unsigned long long>(production_bytes(o.tokens)));
  std::vector<double> gbps;
  int failures = 0;
  for (int r = 0; r < o.requests; ++r) {
    const transfer::RoomId room = static_cast<transfer::RoomId>(r + 1);
    const transfer::Generation gen = static_cast<transfer::Generation>(r + 1);
    for (const transfer::Grant& g : disagg::room_grants(dst, room, gen, dst_pages, 0, 0)) (void)rx.grant(g);
    const auto t0 = Clock::now();
    auto batch = tx.submit(*peer, {room, gen, writes, std::string("done")});
    Status done = batch.is_ok() ? (*batch)->wait(Clock::now() + std::chrono::seconds(600)) : batch.status();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    (void)rx.revoke(room);
    const uint64_t moved = batch.is_ok() ? (*batch)->bytes() : 0;
    if (!done.is_ok() || moved != expect) {
      std::printf("request %2d: FAILED (%s; %llu of %llu bytes)\n", r + 1, done.message().c_str(), static_cast<unsigned long long>(moved),
                  static_cast<unsigned long long>(expect));
      ++failures;
      continue;
    }
    gbps.push_back(moved / secs / 1e9);
    std::printf("request %2d: %.3f s, %.2f GB/s\n", r + 1, secs, gbps.back());
  }
  // The bytes that landed are the bytes sent: the last page of the last layer, and the state.
  const uint64_t last_src = ((src.mla_layers - 1) * src.num_pages + src_pages.back()) * page_bytes;
  const uint64_t last_dst = ((dst.mla_layers - 1) * dst.num_pages + dst_pages.back()) * page_bytes;
  if (std::memcmp(sb.kv.data() + last_src, db.kv.data() + last_dst, page_bytes) != 0 || sb.state != db.state) {
    std::printf("landed bytes differ from the source\n");
    ++failures;
  }
  tx.shutdown();
  rx.shutdown();
  if (gbps.empty()) return 1;
  std::sort(gbps.begin(), gbps.end());
  const double median = gbps[gbps.size() / 2], per_nic = median / n_nics;
  std::printf("median %.2f GB/s (best %.2f) over %zu requests; per NIC %.2f GB/s = %.1f%% of %.0f GB/s line rate\n", median,
              gbps.back(), gbps.size(), per_nic, 100 * per_nic / o.line_rate_gbps, o.line_rate_gbps);
  std::printf("reference: Mooncake ~190 GB/s on 8 NICs = 23.75 GB/s per NIC (47.5%% of 50 GB/s)\n");
  std::printf("a production request (%.3f GB) at the median: %.3f s\n", production_bytes(o.tokens) / 1e9, production_bytes(o.tokens) / 1e9 / median);
  return failures ? 1 : 0;
}

}  // namespace

void add_transfer_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("transfer-bench", "Bytes per Kimi-K3 request and GB/s per NIC of the transfer backend (docs/perf.md)");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--backend", o->backend, "tcp, rdma or auto (the same policy as the servers)")->capture_default_str();
  cmd->add_option("--rdma-nics", o->nics, "RDMA NICs (mlx5_0,mlx5_1)")->delimiter(',');
  cmd->add_option("--rdma-gid-index", o->gid_index, "GID index (-1: automatic)")->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests (rooms) to time, one after another")->capture_default_str();
  cmd->add_option("--streams", o->streams, "TCP connections per peer")->capture_default_str();
  cmd->add_option("--page-size", o->page_size, "Tokens per page")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype, "MLA page dtype moved: float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--decode-run-pages", o->decode_run_pages, "Decode's pages come in runs this long")->capture_default_str();
  cmd->add_option("--line-rate", o->line_rate_gbps, "One NIC's line rate in GB/s (400 Gb/s: 50)")->capture_default_str();
  cmd->callback([o] { std::exit(run(*o)); });
}

}  // namespace pdserve::cli
