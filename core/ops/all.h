#pragma once
// Every op a user can call (flow::add, flow::matmul, ...), one header per op family in this
// folder, each call dispatched through the current interpreter (core/interpreter.h). The layers'
// stateless forms (torch.nn.functional) are nn/functional.h.
#include "core/ops/attention.h"
#include "core/ops/binary.h"
#include "core/ops/conv.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/cumulative.h"
#include "core/ops/index.h"
#include "core/ops/loss.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/reduce.h"
#include "core/ops/softmax.h"
#include "core/ops/sorting.h"
#include "core/ops/strided.h"
#include "core/ops/triangular.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/random.h"
