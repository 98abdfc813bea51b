// Host memory near a GPU: on a host with several NUMA nodes, a device's page-locked host tier is allocated on the node
// its PCIe root sits on, so its copies do not cross the socket interconnect (multi_device_backend.h). No-op on a
// single-node host or where the kernel does not say.
#pragma once

namespace kmfleet {
namespace cuda_backend {

// The NUMA node of CUDA device `device` (sysfs numa_node of its PCI function), -1 when unknown or there is one node.
int deviceNumaNode(int device);

// While alive, this thread's new pages come from `node` first (set_mempolicy MPOL_PREFERRED); node < 0: nothing.
class PreferNumaNode {
 public:
  explicit PreferNumaNode(int node);
  ~PreferNumaNode();
  PreferNumaNode(const PreferNumaNode&) = delete;
  PreferNumaNode& operator=(const PreferNumaNode&) = delete;

 private:
  bool set_ = false;
};

}  // namespace cuda_backend
}  // namespace kmfleet
