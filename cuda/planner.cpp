// Memory planner for the CUDA backend (filled in with the streaming pipeline).
#include "bridge.h"
