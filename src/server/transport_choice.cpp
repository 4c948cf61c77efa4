#include "transport_choice.h"

#include "pdserve/transfer/rdma/transport_policy.h"

namespace pdserve::server {

namespace rdma = transfer::rdma;

Result<TransportChoice> choose_transport(const disagg::DisaggConfig& d) {
  PDS_ASSIGN_OR_RETURN(std::vector<rdma::NicName> nics, rdma::parse_nic_list(d.rdma_nics));
  const rdma::DeviceList here = rdma::list_devices();
  // tcp needs no probe of the configured NICs; the device list is still reported.
  const std::vector<rdma::PortReport> reports = d.transfer_backend == "tcp" ? std::vector<rdma::PortReport>{} : rdma::probe_nics(nics, d.rdma_gid_index);
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

}  // namespace pdserve::server
