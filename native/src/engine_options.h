// Engine.open's options object → EngineConfig, every bad field an InvalidArgument error naming it (the binding's
// half of validation; the Engine checks the values' ranges and relations).
#pragma once

#include <napi.h>

#include "backend.h"

namespace kmfleet {

EngineConfig parseConfig(Napi::Env env, const Napi::Value& value);
const char* precisionName(Precision p);

}  // namespace kmfleet
