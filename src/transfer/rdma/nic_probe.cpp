// The pure half of nic_probe.h: verdicts and descriptions (the ibverbs half is nic_probe_verbs.cpp).
#include "pdserve/transfer/rdma/nic_probe.h"

namespace pdserve::transfer::rdma {

std::string describe_devices(const DeviceList& here) {
  if (!here.error.empty()) return "no RDMA devices (" + here.error + ")";
  if (here.devices.empty()) return "no RDMA devices (ibv_get_device_list found none)";
  std::string s = std::to_string(here.devices.size()) + " RDMA device(s):";
  for (const auto& d : here.devices) s += " " + d;
  return s;
}

std::string PortReport::describe(const DeviceList& here) const {
  const std::string name = nic.to_string();
  if (!device_found) return name + " not found (" + describe_devices(here) + ")";
  if (!port_found) return name + ": the device has no port " + std::to_string(nic.port);
  std::string s = name + " " + state + " " + link_layer_name(link);
  if (link == LinkLayer::kInfiniBand) s += " LID " + std::to_string(lid);
  if (gid)
    s += " GID[" + std::to_string(gid->index) + "] " + gid_type_name(gid->type) + " " + gid_to_string(gid->gid);
  else
    s += " no GID: " + gid_problem;
  if (active_mtu) s += " mtu " + std::to_string(active_mtu);
  return s;
}

std::vector<std::string> nic_problems(const std::vector<PortReport>& reports, const DeviceList& here) {
  std::vector<std::string> out;
  for (const PortReport& r : reports) {
    if (r.usable()) continue;
    if (!r.device_found || !r.port_found)
      out.push_back("RDMA NIC " + r.describe(here));
    else if (!r.active)
      out.push_back("RDMA NIC " + r.nic.to_string() + " port is " + r.state + ", not ACTIVE (check the cable / switch port; `ibv_devinfo -d " +
                    r.nic.device + "`)");
    else
      out.push_back("RDMA NIC " + r.nic.to_string() + " has no usable GID: " + r.gid_problem);
  }
  return out;
}

}  // namespace pdserve::transfer::rdma
