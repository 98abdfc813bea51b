#include "numa_placement.h"

#include <cuda_runtime.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>

namespace kmfleet {
namespace cuda_backend {

namespace {
constexpr int kMpolDefault = 0, kMpolPreferred = 1;  // linux/mempolicy.h

bool severalNodes() {
  std::ifstream f("/sys/devices/system/node/online");  // e.g. "0" or "0-1"
  std::string s;
  return f && std::getline(f, s) && s.find_first_of("-,") != std::string::npos;
}
}  // namespace

int deviceNumaNode(int device) {
  if (!severalNodes()) return -1;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  std::string id(bus);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::ifstream f("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  return f >> node ? node : -1;  // -1 also where the firmware says nothing
}

PreferNumaNode::PreferNumaNode(int node) {
  if (node < 0 || node >= 64) return;
  const unsigned long mask = 1UL << node;
  set_ = syscall(SYS_set_mempolicy, kMpolPreferred, &mask, 64UL) == 0;
}

PreferNumaNode::~PreferNumaNode() {
  if (set_) syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0UL);
}

}  // namespace cuda_backend
}  // namespace kmfleet
