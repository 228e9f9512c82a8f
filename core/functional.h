#pragma once
// The functional API: every op a user can call, each dispatched through the current
// interpreter (core/interpreter.h).
#include "core/ops/binary.h"
#include "core/ops/conv.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/index.h"
#include "core/ops/loss.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/ops/strided.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/random.h"
