#include "pdserve/model/device_forward.h"

namespace pdserve {

DeviceForward::~DeviceForward() = default;

}  // namespace pdserve
