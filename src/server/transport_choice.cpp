#include "transport_choice.h"

#include "pdserve/transfer/rdma/rdma_transport.h"
#include "pdserve/transfer/rdma/transport_policy.h"
#include "pdserve/transfer/rdma/verbs_fabric.h"

namespace pdserve::server {

namespace rdma = transfer::rdma;

Result<TransportChoice> choose_transport(const disagg::DisaggConfig& d, const HttpServer::RdmaHooks& hooks) {
  PDS_ASSIGN_OR_RETURN(std::vector<rdma::NicName> nics, rdma::parse_nic_list(d.rdma_nics));
  const rdma::DeviceList here = hooks.list_devices ? hooks.list_devices() : rdma::list_devices();
  // tcp needs no probe of the configured NICs; the device list is still reported.
  const std::vector<rdma::PortReport> reports =
      d.transfer_backend == "tcp" ? std::vector<rdma::PortReport>{}
                                  : (hooks.probe_nics ? hooks.probe_nics(nics, d.rdma_gid_index) : rdma::probe_nics(nics, d.rdma_gid_index));
  PDS_ASSIGN_OR_RETURN(rdma::TransportDecision dec,
                       rdma::decide_transport(d.transfer_backend, d.transfer_backend == "tcp" ? std::vector<rdma::NicName>{} : nics, reports, here));
  TransportChoice c{dec.backend, dec.reason, Json::object()};
  c.rdma["devices"] = rdma::describe_devices(here);
  c.rdma["gid_index"] = d.rdma_gid_index;
  c.rdma["data_path_built"] = rdma::kRdmaDataPathBuilt;
  Json list = Json::array();
  for (const rdma::PortReport& r : reports) {
    Json n = {{"nic", r.nic.to_string()}, {"usable", r.usable()}, {"state", r.describe(here)}};
    if (r.port_found) n["link_layer"] = rdma::link_layer_name(r.link);
    if (r.gid) {
      n["gid_index"] = r.gid->index;
      n["gid"] = rdma::gid_to_string(r.gid->gid);
      n["gid_type"] = rdma::gid_type_name(r.gid->type);
    }
    list.push_back(std::move(n));
  }
  c.rdma["nics"] = std::move(list);
  return c;
}

Result<std::unique_ptr<transfer::Transport>> make_role_transport(const TransportChoice& choice, const disagg::DisaggConfig& d,
                                                                 const transfer::TcpConfig& tcp,
                                                                 const HttpServer::TransportFactory& make_tcp,
                                                                 const HttpServer::RdmaHooks& hooks) {
  if (choice.backend == "tcp") return make_tcp ? make_tcp(tcp) : transfer::make_tcp_transport(tcp);
  if (choice.backend != "rdma") return internal_error("transport policy chose '" + choice.backend + "'");
  PDS_ASSIGN_OR_RETURN(std::vector<rdma::NicName> nics, rdma::parse_nic_list(d.rdma_nics));
  std::string names;
  for (const rdma::NicName& n : nics) names += (names.empty() ? "" : ",") + n.to_string();
  Result<std::unique_ptr<rdma::Fabric>> fabric =
      hooks.make_fabric ? hooks.make_fabric(nics, d.rdma_gid_index) : rdma::make_verbs_fabric(nics, d.rdma_gid_index);
  if (!fabric.is_ok())
    return Status(ErrorCode::kUnavailable, "rdma transfer: cannot open NICs " + names + ": " + fabric.status().message());
  rdma::RdmaTransportConfig rc;
  rc.control = tcp;  // the control connection listens where TCP's data would, with the same secret
  rc.rdma.nics = d.rdma_nics;
  rc.rdma.gid_index = d.rdma_gid_index;
  Result<std::unique_ptr<transfer::Transport>> t = rdma::make_rdma_transport(rc, std::move(*fabric));
  if (!t.is_ok()) return Status(t.status().code(), "rdma transfer over " + names + ": " + t.status().message());
  return t;
}

}  // namespace pdserve::server
