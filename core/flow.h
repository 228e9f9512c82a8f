#pragma once
// Everything a user of the core needs: #include "core/flow.h".
#include "core/allocator.h"
#include "core/autocast.h"
#include "core/interpreter.h"
#include "core/ops/all.h"
#include "core/serialization.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
