// DeviceCommunicator over NCCL, with libnccl.so.2 opened at first use (device_comm.h says why).
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "common/cuda_check.h"
#include "nccl/device_comm.h"

namespace pdserve::cuda {

namespace {

// The few entry points we call, resolved from the loaded library.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string path;
  std::string error;  // why loading failed; empty when loaded
};

const NcclApi& api() {
  static NcclApi a = [] {
    NcclApi r;
    // PDSERVE_NCCL_LIBRARY names the file; otherwise the loader's search (LD_LIBRARY_PATH).
    const char* env = std::getenv("PDSERVE_NCCL_LIBRARY");
    r.path = env && *env ? env : "libnccl.so.2";
    void* h = dlopen(r.path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      r.error = "cannot load NCCL (" + r.path + "): " + (e ? e : "unknown error") +
                "; put libnccl.so.2 on LD_LIBRARY_PATH or set PDSERVE_NCCL_LIBRARY";
      return r;
    }
    auto sym = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(dlsym(h, name));
      if (!*fn && r.error.empty()) r.error = std::string("NCCL library ") + r.path + " lacks " + name;
    };
    sym("ncclGetVersion", &r.get_version);
    sym("ncclGetUniqueId", &r.get_unique_id);
    sym("ncclCommInitRank", &r.comm_init_rank);
    sym("ncclCommAbort", &r.comm_abort);
    sym("ncclAllReduce", &r.all_reduce);
    sym("ncclAllGather", &r.all_gather);
    sym("ncclSend", &r.send);
    sym("ncclRecv", &r.recv);
    sym("ncclGroupStart", &r.group_start);
    sym("ncclGroupEnd", &r.group_end);
    sym("ncclGetErrorString", &r.error_string);
    return r;
  }();
  return a;
}

Status loaded() {
  if (!api().error.empty()) return unsupported(api().error);
  return Status::ok();
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return internal_error(std::string(what) + ": " + api().error_string(r));
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device) : comm_(comm), rank_(rank), size_(size), device_(device) {}
  // Abort, not Destroy: the owners are torn down one after another on one thread, and a
  // destroy that waits for the other ranks would then hang. Nothing is in flight by now
  // (every forward ends with a stream synchronisation).
  ~NcclCommunicator() override { abort(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }
  Status all_reduce_sum(float* data, int64_t n, cudaStream_t stream) override {
    if (n <= 0) return Status::ok();
    return call("ncclAllReduce", [&] { return api().all_reduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream); });
  }
  Status all_gather(const float* in, int64_t n, float* out, cudaStream_t stream) override {
    if (n <= 0) return Status::ok();
    return call("ncclAllGather", [&] { return api().all_gather(in, out, static_cast<size_t>(n), ncclFloat32, comm_, stream); });
  }
  // Grouped so that a send and a recv on one rank (a middle pipeline stage) cannot deadlock.
  Status send(const void* data, size_t bytes, int peer, cudaStream_t stream) override {
    if (bytes == 0) return Status::ok();
    return call("ncclSend", [&] {
      api().group_start();
      ncclResult_t r = api().send(data, bytes, ncclUint8, peer, comm_, stream);
      ncclResult_t e = api().group_end();
      return r != ncclSuccess ? r : e;
    });
  }
  Status recv(void* data, size_t bytes, int peer, cudaStream_t stream) override {
    if (bytes == 0) return Status::ok();
    return call("ncclRecv", [&] {
      api().group_start();
      ncclResult_t r = api().recv(data, bytes, ncclUint8, peer, comm_, stream);
      ncclResult_t e = api().group_end();
      return r != ncclSuccess ? r : e;
    });
  }
  // ncclCommAbort sets the flag that NCCL's kernels and proxy poll, so a collective spinning
  // on a dead peer ends and the stream drains; it then frees the communicator. The lock keeps
  // that free from racing an enqueue on the engine thread. An enqueue can itself block on the
  // dead peer (NCCL connects peers lazily, at the first collective): after a short wait the
  // abort goes ahead without the lock, since it is what unblocks that call.
  void abort() override {
    if (aborted_.exchange(true) || !comm_) return;
    std::unique_lock<std::timed_mutex> l(mu_, std::defer_lock);
    (void)l.try_lock_for(std::chrono::seconds(2));
    cudaSetDevice(device_);
    api().comm_abort(comm_);
  }

 private:
  template <class F>
  Status call(const char* what, F&& enqueue) {
    std::lock_guard<std::timed_mutex> l(mu_);
    if (aborted_.load()) return Status(ErrorCode::kAborted, std::string(what) + ": the NCCL group was aborted (a peer was lost)");
    return nccl_status(enqueue(), what);
  }
  ncclComm_t comm_;
  int rank_, size_, device_;
  std::timed_mutex mu_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::string nccl_describe() {
  if (!api().error.empty()) return api().error;
  int v = 0;
  api().get_version(&v);
  // Codes since 2.9: major*10000 + minor*100 + patch.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) + " from " + api().path;
}

Result<std::vector<uint8_t>> nccl_unique_id() {
  PDS_RETURN_IF_ERROR(loaded());
  ncclUniqueId id;
  PDS_RETURN_IF_ERROR(nccl_status(api().get_unique_id(&id), "ncclGetUniqueId"));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(id.internal), reinterpret_cast<const uint8_t*>(id.internal) + sizeof(id.internal));
}

Result<std::unique_ptr<DeviceCommunicator>> nccl_join(int rank, int size, const std::vector<uint8_t>& id, int device) {
  PDS_RETURN_IF_ERROR(loaded());
  if (size < 1 || rank < 0 || rank >= size) return invalid_argument("nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  ncclUniqueId uid;
  if (id.size() != sizeof(uid.internal)) return invalid_argument("nccl: the unique id must be " + std::to_string(sizeof(uid.internal)) + " bytes");
  std::memcpy(uid.internal, id.data(), id.size());
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  ncclComm_t comm = nullptr;
  PDS_RETURN_IF_ERROR(nccl_status(api().comm_init_rank(&comm, size, uid, rank), "ncclCommInitRank"));
  return std::unique_ptr<DeviceCommunicator>(new NcclCommunicator(comm, rank, size, device));
}

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_node_group(const std::vector<uint8_t>& id, int world_size,
                                                                               int first_rank, int local_ranks) {
  PDS_RETURN_IF_ERROR(loaded());
  if (local_ranks < 1 || first_rank < 0 || first_rank + local_ranks > world_size)
    return invalid_argument("nccl: ranks " + std::to_string(first_rank) + ".." + std::to_string(first_rank + local_ranks - 1) + " of " +
                            std::to_string(world_size));
  int devices = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&devices), "cudaGetDeviceCount"));
  if (devices < local_ranks)
    return invalid_argument("tensor parallelism: " + std::to_string(local_ranks) + " ranks on this node need " + std::to_string(local_ranks) +
                            " GPUs, this machine has " + std::to_string(devices));
  // ncclCommInitRank blocks until every rank joined: one thread per local rank.
  std::vector<Status> st(local_ranks);
  std::vector<std::unique_ptr<DeviceCommunicator>> out(local_ranks);
  std::vector<std::thread> threads;
  for (int i = 0; i < local_ranks; ++i)
    threads.emplace_back([&, i] {
      auto j = nccl_join(first_rank + i, world_size, id, i);
      if (j.is_ok()) out[i] = std::move(j).value();
      else st[i] = j.status();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st) PDS_RETURN_IF_ERROR(s);
  return out;
}

Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_group(int size) {
  PDS_ASSIGN_OR_RETURN(std::vector<uint8_t> id, nccl_unique_id());
  return make_nccl_node_group(id, size, 0, size);
}

}  // namespace pdserve::cuda
