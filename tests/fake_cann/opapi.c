/* opapi.c: fake libopapi.so: aclnn operators, phase one (checks, workspace size, executor)
 * and kernels computed on the CPU (in double, stored in the tensor's dtype).
 *
 * Exported: Add, Adds, Sub, Subs, Mul, Muls, Div, Divs, Relu, Gelu, GeluV2, Silu, Sigmoid,
 * Tanh, Exp, Softmax, LayerNorm, Matmul, Mm, BatchMatMul, Cast, Permute, InplaceCopy.
 * Deliberately absent: RmsNorm, Addmm, Embedding (the binding must report them as
 * unsupported), and Matmul on 1-D operands (phase one refuses: an aclnn-side error).
 * Softmax and LayerNorm keep their row statistics in the workspace and read them back, so a
 * short or shared workspace shows.  InplaceCopy refuses aclSetAclOpExecutorRepeatable.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fake_cann.h"

/* ---- element access -------------------------------------------------------------------- */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
    if (exponent == 0) {
        float magnitude = ldexpf((float)mantissa, -24);
        return sign ? -magnitude : magnitude;
    }
    bits = exponent == 31 ? sign | 0x7F800000u | (mantissa << 13) : sign | ((exponent + 112) << 23) | (mantissa << 13);
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static uint16_t float_to_half(float value) /* round to nearest even */
{
    uint16_t sign = signbit(value) ? 0x8000 : 0;
    float magnitude = fabsf(value);
    if (isnan(value))
        return sign | 0x7E00;
    if (magnitude >= 65520.0f)
        return sign | 0x7C00;
    if (magnitude < 6.103515625e-05f) /* subnormal: units of 2^-24 (1024 units is the smallest normal) */
        return sign | (uint16_t)lrintf(magnitude * 16777216.0f);
    int exponent;
    float fraction = frexpf(magnitude, &exponent);
    uint32_t mantissa = (uint32_t)lrintf((2.0f * fraction - 1.0f) * 1024.0f);
    uint32_t biased = (uint32_t)(exponent - 1 + 15);
    if (mantissa == 1024) {
        mantissa = 0;
        biased++;
    }
    return biased >= 31 ? (uint16_t)(sign | 0x7C00) : (uint16_t)(sign | (biased << 10) | mantissa);
}

static uint16_t float_to_bf16(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if (isnan(value))
        return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

static double load(const fake_view *v, int64_t index)
{
    const char *at = (const char *)v->data + index * fake_itemsize(v->dtype);
    switch (v->dtype) {
    case ACL_FLOAT: return *(const float *)at;
    case ACL_FLOAT16: return half_to_float(*(const uint16_t *)at);
    case ACL_BF16: {
        uint32_t bits = (uint32_t)*(const uint16_t *)at << 16;
        float value;
        memcpy(&value, &bits, sizeof value);
        return value;
    }
    case ACL_INT8: return *(const int8_t *)at;
    case ACL_UINT8: return *(const uint8_t *)at;
    case ACL_INT32: return *(const int32_t *)at;
    case ACL_INT64: return (double)*(const int64_t *)at;
    case ACL_BOOL: return *(const bool *)at;
    default: return *(const double *)at;
    }
}

static int64_t to_integer(double value) /* truncation toward zero; NaN and overflow are undefined on the device */
{
    if (isnan(value))
        return 0;
    if (value >= 9.2e18)
        return INT64_MAX;
    if (value <= -9.2e18)
        return INT64_MIN;
    return (int64_t)value;
}

static void store(const fake_view *v, int64_t index, double value)
{
    char *at = (char *)v->data + index * fake_itemsize(v->dtype);
    switch (v->dtype) {
    case ACL_FLOAT: *(float *)at = (float)value; break;
    case ACL_FLOAT16: *(uint16_t *)at = float_to_half((float)value); break;
    case ACL_BF16: *(uint16_t *)at = float_to_bf16((float)value); break;
    case ACL_INT8: *(int8_t *)at = (int8_t)to_integer(value); break;
    case ACL_UINT8: *(uint8_t *)at = (uint8_t)to_integer(value); break;
    case ACL_INT32: *(int32_t *)at = (int32_t)to_integer(value); break;
    case ACL_INT64: *(int64_t *)at = to_integer(value); break;
    case ACL_BOOL: *(bool *)at = value != 0.0; break;
    default: *(double *)at = value; break;
    }
}

static int64_t numel(const int64_t *dims, uint64_t ndim)
{
    int64_t count = 1;
    for (uint64_t i = 0; i < ndim; i++)
        count *= dims[i];
    return count;
}

static void unravel(int64_t linear, const int64_t *dims, uint64_t ndim, int64_t *coords)
{
    for (uint64_t i = ndim; i-- > 0;) {
        coords[i] = dims[i] ? linear % dims[i] : 0;
        linear = dims[i] ? linear / dims[i] : 0;
    }
}

/* Element index of coords (an ndim-dim iteration space) in v, broadcasting from the right. */
static int64_t at(const fake_view *v, const int64_t *coords, uint64_t ndim)
{
    int64_t index = v->offset;
    uint64_t lead = ndim - v->ndim;
    for (uint64_t i = 0; i < v->ndim; i++)
        if (v->dims[i] != 1)
            index += coords[lead + i] * v->strides[i];
    return index;
}

static uint64_t round32(uint64_t nbytes) { return (nbytes + 31) / 32 * 32; }

/* ---- phase-one checks: "aclnnOp: argument: expected ..., got ..." ----------------------- */
enum { FLOATS = 1, NUMBERS = 2 };

static int need_tensor(const char *op, const char *name, const aclTensor *t, int kinds)
{
    if (!t)
        return fakecann_fail(ACLNN_ERR_PARAM_NULLPTR, "aclnn%s: %s: expected a tensor, got NULL", op, name);
    if (!fakecann_tensor_live(t))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: %s: expected a live aclTensor, got %p", op, name,
                             (const void *)t);
    int dtype = t->view.dtype;
    bool floating = dtype == ACL_FLOAT || dtype == ACL_FLOAT16 || dtype == ACL_BF16;
    if (!fake_itemsize(dtype) || dtype == ACL_DOUBLE || (kinds == FLOATS && !floating))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: %s: expected a %s dtype, got aclDataType %d", op, name,
                             kinds == FLOATS ? "floating" : "supported", dtype);
    return ACL_SUCCESS;
}

static int need_shape(const char *op, const char *name, const fake_view *v, const int64_t *dims, uint64_t ndim)
{
    bool same = v->ndim == ndim;
    for (uint64_t i = 0; same && i < ndim; i++)
        same = v->dims[i] == dims[i];
    if (!same)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: %s: expected a shape of %llu dims matching the "
                             "inputs, got another (%llu dims)", op, name, (unsigned long long)ndim,
                             (unsigned long long)v->ndim);
    return ACL_SUCCESS;
}

static int broadcast(const char *op, const fake_view *a, const fake_view *b, int64_t *dims, uint64_t *ndim)
{
    *ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (uint64_t i = 0; i < *ndim; i++) {
        int64_t da = i < *ndim - a->ndim ? 1 : a->dims[i - (*ndim - a->ndim)];
        int64_t db = i < *ndim - b->ndim ? 1 : b->dims[i - (*ndim - b->ndim)];
        if (da != db && da != 1 && db != 1)
            return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: shapes do not broadcast: dim %llu is %lld and %lld",
                                 op, (unsigned long long)i, (long long)da, (long long)db);
        dims[i] = da == 1 ? db : da;
    }
    return ACL_SUCCESS;
}

static int need_scalar(const char *op, const char *name, const aclScalar *s)
{
    if (!s)
        return fakecann_fail(ACLNN_ERR_PARAM_NULLPTR, "aclnn%s: %s: expected a scalar, got NULL", op, name);
    if (!fakecann_scalar_live(s))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: %s: expected a live aclScalar", op, name);
    return ACL_SUCCESS;
}

static int need_outputs(const char *op, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (!workspaceSize || !executor)
        return fakecann_fail(ACLNN_ERR_PARAM_NULLPTR, "aclnn%s: workspaceSize and executor must not be NULL", op);
    return ACL_SUCCESS;
}

static aclOpExecutor *make(const char *op, fake_kernel kernel, uint64_t workspace, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    aclOpExecutor *e = fakecann_executor_new(op, kernel, workspace);
    *workspaceSize = workspace;
    *executor = e;
    return e;
}

static void bind(aclOpExecutor *e, int index, const aclTensor *t, bool output)
{
    if (!t)
        return;
    if (output) {
        e->call.has_out[index] = true;
        e->call.out[index] = t->view;
        e->out_handle[index] = (aclTensor *)t;
    } else {
        e->call.has_in[index] = true;
        e->call.in[index] = t->view;
        e->in_handle[index] = (aclTensor *)t;
    }
}

#define LAUNCH(name)                                                                                             \
    aclnnStatus aclnn##name(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) \
    {                                                                                                            \
        return fakecann_launch(workspace, workspaceSize, executor, stream, "aclnn" #name);                       \
    }

/* ---- elementwise ----------------------------------------------------------------------- */
enum { ADD, SUB, MUL, DIV, RELU, GELU, GELU_TANH, SILU, SIGMOID, TANH, EXP, MINIMUM, NEG, AND };

static double apply(int kind, double a, double b, double alpha)
{
    switch (kind) {
    case ADD: return a + alpha * b;
    case SUB: return a - alpha * b;
    case MUL: return a * b;
    case DIV: return a / b;
    case RELU: return a > 0 ? a : 0.0;
    case GELU: return 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
    case GELU_TANH: return 0.5 * a * (1.0 + tanh(sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
    case SILU: return a / (1.0 + exp(-a));
    case SIGMOID: return 1.0 / (1.0 + exp(-a));
    case TANH: return tanh(a);
    case MINIMUM: return isnan(a) || isnan(b) ? NAN : (a < b ? a : b); /* NaN propagates, as torch.minimum */
    case NEG: return -a;
    case AND: return a != 0.0 && b != 0.0;
    default: return exp(a);
    }
}

/* in[0] op (in[1] or real[1]) with alpha real[0]; integer[0] is the kind. */
static int elementwise_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *out = &c->out[0];
    int64_t coords[FAKE_MAX_DIMS], count = numel(out->dims, out->ndim);
    for (int64_t i = 0; i < count; i++) {
        unravel(i, out->dims, out->ndim, coords);
        double a = load(&c->in[0], at(&c->in[0], coords, out->ndim));
        double b = c->has_in[1] ? load(&c->in[1], at(&c->in[1], coords, out->ndim)) : c->real[1];
        store(out, at(out, coords, out->ndim), apply((int)c->integer[0], a, b, c->real[0]));
    }
    return ACL_SUCCESS;
}

static aclnnStatus binary(const char *op, int kind, const aclTensor *self, const aclTensor *other,
                          const aclScalar *scalar, const aclScalar *alpha, bool takes_alpha, const aclTensor *out,
                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int64_t dims[FAKE_MAX_DIMS];
    uint64_t ndim = 0;
    int rc = need_tensor(op, "self", self, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = scalar ? need_scalar(op, "other", scalar) : need_tensor(op, "other", other, NUMBERS);
    if (rc == ACL_SUCCESS && takes_alpha)
        rc = need_scalar(op, "alpha", alpha);
    if (rc == ACL_SUCCESS)
        rc = need_tensor(op, "out", out, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = broadcast(op, &self->view, scalar ? &self->view : &other->view, dims, &ndim);
    if (rc == ACL_SUCCESS)
        rc = need_shape(op, "out", &out->view, dims, ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs(op, workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make(op, elementwise_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 1, scalar ? NULL : other, false);
    bind(e, 0, out, true);
    e->call.real[0] = takes_alpha ? alpha->value : 1.0;
    e->call.real[1] = scalar ? scalar->value : 0.0;
    e->call.integer[0] = kind;
    return ACL_SUCCESS;
}

static aclnnStatus unary(const char *op, int kind, int kinds, const aclTensor *self, const aclTensor *out,
                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int rc = need_tensor(op, "self", self, kinds);
    if (rc == ACL_SUCCESS)
        rc = need_tensor(op, "out", out, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_shape(op, "out", &out->view, self->view.dims, self->view.ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs(op, workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make(op, elementwise_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 0, out, true);
    e->call.integer[0] = kind;
    return ACL_SUCCESS;
}

#define BINARY_API(name, kind)                                                                                  \
    aclnnStatus aclnn##name##GetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha, \
                                              aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) \
    {                                                                                                           \
        return binary(#name, kind, self, other, NULL, alpha, true, out, workspaceSize, executor);               \
    }                                                                                                           \
    aclnnStatus aclnn##name##sGetWorkspaceSize(const aclTensor *self, const aclScalar *other, const aclScalar *alpha, \
                                               aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) \
    {                                                                                                           \
        return binary(#name "s", kind, self, NULL, other, alpha, true, out, workspaceSize, executor);           \
    }                                                                                                           \
    LAUNCH(name)                                                                                                \
    LAUNCH(name##s)

#define PRODUCT_API(name, kind)                                                                                 \
    aclnnStatus aclnn##name##GetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,     \
                                              uint64_t *workspaceSize, aclOpExecutor **executor)                \
    {                                                                                                           \
        return binary(#name, kind, self, other, NULL, NULL, false, out, workspaceSize, executor);               \
    }                                                                                                           \
    aclnnStatus aclnn##name##sGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,    \
                                               uint64_t *workspaceSize, aclOpExecutor **executor)               \
    {                                                                                                           \
        return binary(#name "s", kind, self, NULL, other, NULL, false, out, workspaceSize, executor);           \
    }                                                                                                           \
    LAUNCH(name)                                                                                                \
    LAUNCH(name##s)

#define UNARY_API(name, kind, kinds)                                                                            \
    aclnnStatus aclnn##name##GetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,    \
                                              aclOpExecutor **executor)                                         \
    {                                                                                                           \
        return unary(#name, kind, kinds, self, out, workspaceSize, executor);                                   \
    }                                                                                                           \
    LAUNCH(name)

BINARY_API(Add, ADD)
BINARY_API(Sub, SUB)
PRODUCT_API(Mul, MUL)
PRODUCT_API(Div, DIV)
UNARY_API(Relu, RELU, NUMBERS)
UNARY_API(Gelu, GELU, FLOATS)
UNARY_API(Silu, SILU, FLOATS)
UNARY_API(Sigmoid, SIGMOID, NUMBERS)
UNARY_API(Tanh, TANH, NUMBERS)
UNARY_API(Exp, EXP, NUMBERS)
UNARY_API(Neg, NEG, NUMBERS)

/* Two tensors, no alpha and no scalar form (aclnnMinimum, aclnnLogicalAnd). */
#define PAIR_API(name, kind)                                                                                    \
    aclnnStatus aclnn##name##GetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,     \
                                              uint64_t *workspaceSize, aclOpExecutor **executor)                \
    {                                                                                                           \
        return binary(#name, kind, self, other, NULL, NULL, false, out, workspaceSize, executor);               \
    }                                                                                                           \
    LAUNCH(name)

PAIR_API(Minimum, MINIMUM)
PAIR_API(LogicalAnd, AND)

aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                        uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (approximate != 0 && approximate != 1)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnGeluV2: approximate: expected 0 or 1, got %lld",
                             (long long)approximate);
    return unary("GeluV2", approximate ? GELU_TANH : GELU, FLOATS, x, y, workspaceSize, executor);
}
LAUNCH(GeluV2)

/* ---- softmax: row max and row sum live in the workspace -------------------------------- */
static int softmax_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *x = &c->in[0], *out = &c->out[0];
    uint64_t ndim = x->ndim, d = (uint64_t)c->integer[0];
    int64_t length = ndim ? x->dims[d] : 1, inner = 1, coords[FAKE_MAX_DIMS];
    for (uint64_t i = d + 1; i < ndim; i++)
        inner *= x->dims[i];
    int64_t rows = length ? numel(x->dims, ndim) / length : 0;
    float *row_max = (float *)c->workspace;
    float *row_sum = (float *)((char *)c->workspace + round32((uint64_t)rows * 4));
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = (r / inner) * length * inner + r % inner;
        row_max[r] = -INFINITY;
        for (int64_t j = 0; j < length; j++) {
            unravel(base + j * inner, x->dims, ndim, coords);
            row_max[r] = fmaxf(row_max[r], (float)load(x, at(x, coords, ndim)));
        }
        double sum = 0.0;
        for (int64_t j = 0; j < length; j++) {
            unravel(base + j * inner, x->dims, ndim, coords);
            sum += exp(load(x, at(x, coords, ndim)) - row_max[r]);
        }
        row_sum[r] = (float)sum;
        for (int64_t j = 0; j < length; j++) {
            unravel(base + j * inner, x->dims, ndim, coords);
            store(out, at(out, coords, ndim), exp(load(x, at(x, coords, ndim)) - row_max[r]) / row_sum[r]);
        }
    }
    return ACL_SUCCESS;
}

aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out, uint64_t *workspaceSize,
                                         aclOpExecutor **executor)
{
    int rc = need_tensor("Softmax", "self", self, FLOATS);
    int64_t ndim = rc == ACL_SUCCESS ? (int64_t)self->view.ndim : 0, span = ndim ? ndim : 1;
    if (rc == ACL_SUCCESS && (dim < -span || dim >= span))
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnSoftmax: dim: expected a dim in [%lld, %lld), got %lld",
                           (long long)-span, (long long)span, (long long)dim);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("Softmax", "out", out, FLOATS);
    if (rc == ACL_SUCCESS)
        rc = need_shape("Softmax", "out", &out->view, self->view.dims, self->view.ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("Softmax", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    int64_t d = ndim ? (dim + ndim) % ndim : 0, length = ndim ? self->view.dims[d] : 1;
    uint64_t rows = length ? (uint64_t)(numel(self->view.dims, self->view.ndim) / length) : 0;
    aclOpExecutor *e = make("Softmax", softmax_kernel, 2 * round32(rows * 4), workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 0, out, true);
    e->call.integer[0] = d;
    return ACL_SUCCESS;
}
LAUNCH(Softmax)

/* ---- layer norm: mean and rstd per row live in the workspace --------------------------- */
static int layer_norm_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *x = &c->in[0];
    uint64_t ndim = x->ndim, k = (uint64_t)c->integer[0];
    int64_t columns = numel(x->dims + (ndim - k), k), coords[FAKE_MAX_DIMS];
    int64_t rows = columns ? numel(x->dims, ndim) / columns : 0;
    float *mean = (float *)c->workspace, *rstd = (float *)((char *)c->workspace + round32((uint64_t)rows * 4));
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0.0, squares = 0.0;
        for (int64_t j = 0; j < columns; j++) {
            unravel(r * columns + j, x->dims, ndim, coords);
            sum += load(x, at(x, coords, ndim));
        }
        mean[r] = (float)(sum / (double)columns);
        for (int64_t j = 0; j < columns; j++) {
            unravel(r * columns + j, x->dims, ndim, coords);
            double centered = load(x, at(x, coords, ndim)) - mean[r];
            squares += centered * centered;
        }
        rstd[r] = (float)(1.0 / sqrt(squares / (double)columns + c->real[0]));
        for (int64_t j = 0; j < columns; j++) {
            unravel(r * columns + j, x->dims, ndim, coords);
            double y = (load(x, at(x, coords, ndim)) - mean[r]) * rstd[r];
            if (c->has_in[1])
                y *= load(&c->in[1], at(&c->in[1], coords + (ndim - k), k));
            if (c->has_in[2])
                y += load(&c->in[2], at(&c->in[2], coords + (ndim - k), k));
            store(&c->out[0], at(&c->out[0], coords, ndim), y);
        }
        if (c->has_out[1])
            store(&c->out[1], at(&c->out[1], coords, ndim), mean[r]);
        if (c->has_out[2])
            store(&c->out[2], at(&c->out[2], coords, ndim), rstd[r]);
    }
    return ACL_SUCCESS;
}

static int need_statistic(const char *name, const aclTensor *t, const fake_view *x, uint64_t k)
{
    if (!t)
        return ACL_SUCCESS;
    int rc = need_tensor("LayerNorm", name, t, FLOATS);
    int64_t dims[FAKE_MAX_DIMS];
    for (uint64_t i = 0; i < x->ndim; i++)
        dims[i] = i < x->ndim - k ? x->dims[i] : 1;
    return rc == ACL_SUCCESS ? need_shape("LayerNorm", name, &t->view, dims, x->ndim) : rc;
}

aclnnStatus aclnnLayerNormGetWorkspaceSize(const aclTensor *input, const aclIntArray *normalizedShape,
                                           const aclTensor *weightOptional, const aclTensor *biasOptional, double eps,
                                           aclTensor *out, aclTensor *meanOutOptional, aclTensor *rstdOutOptional,
                                           uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int rc = need_tensor("LayerNorm", "input", input, FLOATS);
    if (rc == ACL_SUCCESS && !normalizedShape)
        rc = fakecann_fail(ACLNN_ERR_PARAM_NULLPTR, "aclnnLayerNorm: normalizedShape: expected an int array, got NULL");
    else if (rc == ACL_SUCCESS && !fakecann_int_array_live(normalizedShape))
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: normalizedShape: expected a live aclIntArray");
    uint64_t k = rc == ACL_SUCCESS ? normalizedShape->size : 0;
    const fake_view *x = rc == ACL_SUCCESS ? &input->view : NULL;
    bool trailing = rc == ACL_SUCCESS && k > 0 && k <= x->ndim;
    for (uint64_t i = 0; trailing && i < k; i++)
        trailing = normalizedShape->values[i] == x->dims[x->ndim - k + i];
    if (rc == ACL_SUCCESS && !trailing)
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnLayerNorm: normalizedShape: expected the non-empty trailing "
                           "dims of input, got %llu dims that differ", (unsigned long long)k);
    const aclTensor *parameters[2] = {weightOptional, biasOptional};
    for (int i = 0; rc == ACL_SUCCESS && i < 2; i++) {
        if (parameters[i])
            rc = need_tensor("LayerNorm", i ? "biasOptional" : "weightOptional", parameters[i], FLOATS);
        if (rc == ACL_SUCCESS && parameters[i])
            rc = need_shape("LayerNorm", i ? "biasOptional" : "weightOptional", &parameters[i]->view,
                            normalizedShape->values, k);
    }
    if (rc == ACL_SUCCESS)
        rc = need_tensor("LayerNorm", "out", out, FLOATS);
    if (rc == ACL_SUCCESS)
        rc = need_shape("LayerNorm", "out", &out->view, x->dims, x->ndim);
    if (rc == ACL_SUCCESS)
        rc = need_statistic("meanOutOptional", meanOutOptional, x, k);
    if (rc == ACL_SUCCESS)
        rc = need_statistic("rstdOutOptional", rstdOutOptional, x, k);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("LayerNorm", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    int64_t columns = numel(normalizedShape->values, k);
    uint64_t rows = columns ? (uint64_t)(numel(x->dims, x->ndim) / columns) : 0;
    aclOpExecutor *e = make("LayerNorm", layer_norm_kernel, 2 * round32(rows * 4), workspaceSize, executor);
    bind(e, 0, input, false);
    bind(e, 1, weightOptional, false);
    bind(e, 2, biasOptional, false);
    bind(e, 0, out, true);
    bind(e, 1, meanOutOptional, true);
    bind(e, 2, rstdOutOptional, true);
    e->call.real[0] = eps;
    e->call.integer[0] = (int64_t)k;
    return ACL_SUCCESS;
}
LAUNCH(LayerNorm)

/* ---- matrix products --------------------------------------------------------------------- */
/* A float32 operand as an Atlas A2 cube unit reads it under cubeMathType (ops-nn aclnnMatmul.md):
 * 1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32 round to HF32 (11 mantissa bits), 2 USE_FP16 to
 * float16, 0 KEEP_DTYPE and 4 USE_FP32_ADD keep float32. */
static double cube_operand(const fake_view *v, int64_t index, int64_t mode)
{
    double value = load(v, index);
    if (v->dtype != ACL_FLOAT || !isfinite(value))
        return value;
    if (mode == 2)
        return half_to_float(float_to_half((float)value));
    if (mode == 1 || mode == 3) {
        float single = (float)value;
        uint32_t bits;
        memcpy(&bits, &single, sizeof bits);
        bits = (bits + 0x800u) & 0xFFFFF000u;
        memcpy(&single, &bits, sizeof single);
        return single;
    }
    return value;
}

static int matmul_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *a = &c->in[0], *b = &c->in[1], *out = &c->out[0];
    uint64_t nd = out->ndim;
    int64_t depth = a->dims[a->ndim - 1], coords[FAKE_MAX_DIMS], ca[FAKE_MAX_DIMS], cb[FAKE_MAX_DIMS];
    int64_t count = numel(out->dims, nd);
    for (int64_t i = 0; i < count; i++) {
        unravel(i, out->dims, nd, coords);
        memcpy(ca, coords, sizeof ca);
        memcpy(cb, coords, sizeof cb);
        double sum = 0.0;
        for (int64_t t = 0; t < depth; t++) {
            ca[nd - 1] = t;
            cb[nd - 2] = t;
            sum += cube_operand(a, at(a, ca, nd), c->integer[0]) * cube_operand(b, at(b, cb, nd), c->integer[0]);
        }
        store(out, at(out, coords, nd), sum);
    }
    return ACL_SUCCESS;
}

static aclnnStatus product(const char *op, uint64_t want_ndim, const aclTensor *self, const aclTensor *mat2,
                           const aclTensor *out, int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int rc = need_tensor(op, "self", self, FLOATS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor(op, "mat2", mat2, FLOATS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor(op, "out", out, FLOATS);
    if (rc == ACL_SUCCESS && (cubeMathType < 0 || cubeMathType > 4))
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: cubeMathType: expected 0..4, got %d", op, cubeMathType);
    if (rc != ACL_SUCCESS)
        return rc;
    const fake_view *a = &self->view, *b = &mat2->view;
    if (a->ndim < 2 || b->ndim < 2 || (want_ndim && (a->ndim != want_ndim || b->ndim != want_ndim)))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: self, mat2: expected %s operands (the fake has no 1-D "
                             "matmul), got %llu-D and %llu-D", op, want_ndim == 2 ? "2-D" : want_ndim == 3 ? "3-D" : "2-D or "
                             "higher", (unsigned long long)a->ndim, (unsigned long long)b->ndim);
    if (a->dims[a->ndim - 1] != b->dims[b->ndim - 2])
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnn%s: mat2: expected %lld rows, got %lld", op,
                             (long long)a->dims[a->ndim - 1], (long long)b->dims[b->ndim - 2]);
    fake_view batch_a = *a, batch_b = *b;
    batch_a.ndim -= 2;
    batch_b.ndim -= 2;
    int64_t dims[FAKE_MAX_DIMS];
    uint64_t ndim = 0;
    rc = broadcast(op, &batch_a, &batch_b, dims, &ndim);
    dims[ndim] = a->dims[a->ndim - 2];
    dims[ndim + 1] = b->dims[b->ndim - 1];
    if (rc == ACL_SUCCESS)
        rc = need_shape(op, "out", &out->view, dims, ndim + 2);
    if (rc == ACL_SUCCESS)
        rc = need_outputs(op, workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make(op, matmul_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 1, mat2, false);
    bind(e, 0, out, true);
    e->call.integer[0] = cubeMathType;
    return ACL_SUCCESS;
}

#define PRODUCT(name, ndim)                                                                                     \
    aclnnStatus aclnn##name##GetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,      \
                                              int8_t cubeMathType, uint64_t *workspaceSize,                     \
                                              aclOpExecutor **executor)                                         \
    {                                                                                                           \
        return product(#name, ndim, self, mat2, out, cubeMathType, workspaceSize, executor);                    \
    }                                                                                                           \
    LAUNCH(name)

PRODUCT(Matmul, 0)
PRODUCT(Mm, 2)
PRODUCT(BatchMatMul, 3)

/* ---- data movement ----------------------------------------------------------------------- */
/* out[c] = in[0][c] (broadcast), or with list_len > 0 out[c] = in[0][c permuted by list]. */
static int copy_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *x = &c->in[0], *out = &c->out[0];
    int64_t coords[FAKE_MAX_DIMS], source[FAKE_MAX_DIMS], count = numel(out->dims, out->ndim);
    for (int64_t i = 0; i < count; i++) {
        unravel(i, out->dims, out->ndim, coords);
        for (uint64_t j = 0; j < c->list_len; j++)
            source[c->list[j]] = coords[j];
        const int64_t *from = c->list_len ? source : coords;
        store(out, at(out, coords, out->ndim), load(x, at(x, from, c->list_len ? x->ndim : out->ndim)));
    }
    return ACL_SUCCESS;
}

aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, int dtype, aclTensor *out, uint64_t *workspaceSize,
                                      aclOpExecutor **executor)
{
    int rc = need_tensor("Cast", "self", self, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("Cast", "out", out, NUMBERS);
    if (rc == ACL_SUCCESS && out->view.dtype != dtype)
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnCast: out: expected aclDataType %d, got %d", dtype,
                           out->view.dtype);
    if (rc == ACL_SUCCESS)
        rc = need_shape("Cast", "out", &out->view, self->view.dims, self->view.ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("Cast", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("Cast", copy_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 0, out, true);
    return ACL_SUCCESS;
}
LAUNCH(Cast)

aclnnStatus aclnnPermuteGetWorkspaceSize(const aclTensor *self, const aclIntArray *dims, aclTensor *out,
                                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int rc = need_tensor("Permute", "self", self, NUMBERS);
    int64_t ndim = rc == ACL_SUCCESS ? (int64_t)self->view.ndim : 0, order[FAKE_MAX_DIMS], shape[FAKE_MAX_DIMS];
    bool seen[FAKE_MAX_DIMS] = {false};
    bool valid = rc == ACL_SUCCESS && dims && fakecann_int_array_live(dims) && (int64_t)dims->size == ndim;
    for (int64_t j = 0; valid && j < ndim; j++) {
        int64_t d = dims->values[j] < 0 ? dims->values[j] + ndim : dims->values[j];
        valid = d >= 0 && d < ndim && !seen[d];
        if (valid) {
            seen[d] = true;
            order[j] = d;
            shape[j] = self->view.dims[d];
        }
    }
    if (rc == ACL_SUCCESS && !valid)
        rc = fakecann_fail(dims ? ACLNN_ERR_PARAM_INVALID : ACLNN_ERR_PARAM_NULLPTR,
                           "aclnnPermute: dims: expected a permutation of %lld dims", (long long)ndim);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("Permute", "out", out, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_shape("Permute", "out", &out->view, shape, (uint64_t)ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("Permute", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("Permute", copy_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 0, out, true);
    memcpy(e->call.list, order, sizeof order);
    e->call.list_len = (uint64_t)ndim;
    return ACL_SUCCESS;
}
LAUNCH(Permute)

/* selfRef is written, so it is output 0; src is input 0. */
aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,
                                             aclOpExecutor **executor)
{
    int64_t dims[FAKE_MAX_DIMS];
    uint64_t ndim = 0;
    int rc = need_tensor("InplaceCopy", "selfRef", selfRef, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("InplaceCopy", "src", src, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = broadcast("InplaceCopy", &selfRef->view, &src->view, dims, &ndim);
    if (rc == ACL_SUCCESS)
        rc = need_shape("InplaceCopy", "src (broadcast)", &selfRef->view, dims, ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("InplaceCopy", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("InplaceCopy", copy_kernel, 0, workspaceSize, executor);
    bind(e, 0, src, false);
    bind(e, 0, selfRef, true);
    e->refuses_repeatable = true;
    return ACL_SUCCESS;
}
LAUNCH(InplaceCopy)

/* ---- indexing: IndexSelect, SWhere (the catalog's Where), InplaceScatterUpdate -------------- */
/* out[c] = in[0][c with c[dim] replaced by in[1][c[dim]]]; integer[0] is dim. */
static int index_select_kernel(const fake_call *c, char *why, size_t why_len)
{
    const fake_view *x = &c->in[0], *index = &c->in[1], *out = &c->out[0];
    int64_t dim = c->integer[0], coords[FAKE_MAX_DIMS], count = numel(out->dims, out->ndim);
    for (int64_t i = 0; i < count; i++) {
        unravel(i, out->dims, out->ndim, coords);
        int64_t position = coords[dim], picked = (int64_t)load(index, at(index, &position, 1));
        if (picked < 0 || picked >= x->dims[dim]) {
            snprintf(why, why_len, "aclnnIndexSelect: index %lld is outside dim %lld of size %lld", (long long)picked,
                     (long long)dim, (long long)x->dims[dim]);
            return ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW;
        }
        coords[dim] = picked;
        int64_t from = at(x, coords, x->ndim);
        coords[dim] = position;
        store(out, at(out, coords, out->ndim), load(x, from));
    }
    return ACL_SUCCESS;
}

aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                             aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int rc = need_tensor("IndexSelect", "self", self, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("IndexSelect", "index", index, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("IndexSelect", "out", out, NUMBERS);
    int64_t ndim = rc == ACL_SUCCESS ? (int64_t)self->view.ndim : 0, shape[FAKE_MAX_DIMS];
    if (dim < 0)
        dim += ndim;
    if (rc == ACL_SUCCESS && (dim < 0 || dim >= ndim || index->view.ndim != 1 ||
                              (index->view.dtype != ACL_INT64 && index->view.dtype != ACL_INT32)))
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnIndexSelect: expected dim in [0, %lld) and a 1-d int32 "
                           "or int64 index", (long long)ndim);
    for (int64_t d = 0; rc == ACL_SUCCESS && d < ndim; d++)
        shape[d] = d == dim ? index->view.dims[0] : self->view.dims[d];
    if (rc == ACL_SUCCESS)
        rc = need_shape("IndexSelect", "out", &out->view, shape, (uint64_t)ndim);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("IndexSelect", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("IndexSelect", index_select_kernel, 0, workspaceSize, executor);
    bind(e, 0, self, false);
    bind(e, 1, index, false);
    bind(e, 0, out, true);
    e->call.integer[0] = dim;
    return ACL_SUCCESS;
}
LAUNCH(IndexSelect)

/* out[c] = in[0][c] ? in[1][c] : in[2][c], each broadcast to out. */
static int where_kernel(const fake_call *c, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    const fake_view *out = &c->out[0];
    int64_t coords[FAKE_MAX_DIMS], count = numel(out->dims, out->ndim);
    for (int64_t i = 0; i < count; i++) {
        unravel(i, out->dims, out->ndim, coords);
        int pick = load(&c->in[0], at(&c->in[0], coords, out->ndim)) != 0.0 ? 1 : 2;
        store(out, at(out, coords, out->ndim), load(&c->in[pick], at(&c->in[pick], coords, out->ndim)));
    }
    return ACL_SUCCESS;
}

aclnnStatus aclnnSWhereGetWorkspaceSize(const aclTensor *condition, const aclTensor *self, const aclTensor *other,
                                        aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    int64_t dims[FAKE_MAX_DIMS], all[FAKE_MAX_DIMS];
    uint64_t ndim = 0, total = 0;
    int rc = need_tensor("SWhere", "condition", condition, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("SWhere", "self", self, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("SWhere", "other", other, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("SWhere", "out", out, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = broadcast("SWhere", &self->view, &other->view, dims, &ndim);
    if (rc == ACL_SUCCESS) {
        fake_view joined = self->view;
        joined.ndim = ndim;
        memcpy(joined.dims, dims, sizeof dims);
        rc = broadcast("SWhere", &condition->view, &joined, all, &total);
    }
    if (rc == ACL_SUCCESS)
        rc = need_shape("SWhere", "out", &out->view, all, total);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("SWhere", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("SWhere", where_kernel, 0, workspaceSize, executor);
    bind(e, 0, condition, false);
    bind(e, 1, self, false);
    bind(e, 2, other, false);
    bind(e, 0, out, true);
    return ACL_SUCCESS;
}
LAUNCH(SWhere)

/* aclnnInplaceScatterUpdate (hicann/ops-nn index/scatter/docs/aclnnInplaceScatterUpdate.md): row r of
 * updates (in[1]) goes to data (out[0]) at batch b and offset o along axis (integer[0], made
 * non-negative): 2-D indices (in[0]) give (b, o) = indices[r], 1-D ones b = r and o = indices[r],
 * 0-d ones b = 0 and o = indices.  data[b][..][o + k][..] = updates[r][..][k][..].  CANN reads
 * the indices unchecked (non-negative and in bounds is the caller's duty); the fake traps. */
static int scatter_update_kernel(const fake_call *c, char *why, size_t why_len)
{
    const fake_view *indices = &c->in[0], *updates = &c->in[1], *data = &c->out[0];
    int64_t axis = c->integer[0], coords[FAKE_MAX_DIMS], target[FAKE_MAX_DIMS];
    int64_t per_row = numel(updates->dims + 1, updates->ndim - 1);
    for (int64_t r = 0; r < updates->dims[0]; r++) {
        int64_t pair[2] = {r, 0}, column[2] = {r, 1}, batch = r, offset;
        if (indices->ndim == 2) {
            batch = (int64_t)load(indices, at(indices, pair, 2));
            offset = (int64_t)load(indices, at(indices, column, 2));
        } else {
            offset = (int64_t)load(indices, indices->ndim ? at(indices, &r, 1) : indices->offset);
        }
        if (batch < 0 || batch >= data->dims[0] || offset < 0 || offset + updates->dims[axis] > data->dims[axis]) {
            snprintf(why, why_len, "aclnnInplaceScatterUpdate: indices[%lld] = (%lld, %lld): expected a batch index "
                     "below %lld and %lld positions from the offset within the %lld of axis %lld", (long long)r,
                     (long long)batch, (long long)offset, (long long)data->dims[0], (long long)updates->dims[axis],
                     (long long)data->dims[axis], (long long)axis);
            return ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW;
        }
        for (int64_t i = 0; i < per_row; i++) {
            unravel(i, updates->dims + 1, updates->ndim - 1, coords + 1);
            coords[0] = r;
            memcpy(target, coords, sizeof(int64_t) * updates->ndim);
            target[0] = batch;
            target[axis] += offset;
            store(data, at(data, target, data->ndim), load(updates, at(updates, coords, updates->ndim)));
        }
    }
    return ACL_SUCCESS;
}

static bool scatter_dtype(int dtype)
{
    return dtype == ACL_INT8 || dtype == ACL_UINT8 || dtype == ACL_FLOAT16 || dtype == ACL_FLOAT ||
           dtype == ACL_INT32 || dtype == ACL_BF16;
}

/* The doc's phase-one refusals (161002), after the null ones (161001). */
static int scatter_update_check(const aclTensor *data, const aclTensor *indices, const aclTensor *updates,
                                int64_t *axis)
{
    const fake_view *d = &data->view, *i = &indices->view, *u = &updates->view;
    int64_t rank = (int64_t)d->ndim, rows = i->ndim ? i->dims[0] : 1;
    if (!scatter_dtype(d->dtype) || u->dtype != d->dtype || (i->dtype != ACL_INT32 && i->dtype != ACL_INT64))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: expected data and updates of one "
                             "dtype among INT8, UINT8, FLOAT16, FLOAT32, INT32, BFLOAT16 and int32 or int64 indices, "
                             "got aclDataType %d, %d and %d", d->dtype, u->dtype, i->dtype);
    if (rank < 2 || rank > 8 || (int64_t)u->ndim != rank || i->ndim > 2 || (i->ndim == 2 && i->dims[1] != 2))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: expected data of 2-8 dims, updates "
                             "of as many and indices of 0, 1 or 2 dims ([n, 2] when 2), got %llu, %llu and %llu dims",
                             (unsigned long long)d->ndim, (unsigned long long)u->ndim, (unsigned long long)i->ndim);
    if (numel(d->dims, d->ndim) == 0 || numel(u->dims, u->ndim) == 0 || numel(i->dims, i->ndim) == 0)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: expected non-empty tensors");
    if (*axis <= -rank || *axis >= rank || *axis == 0)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: axis: expected an int in "
                             "(%lld, %lld) other than 0, got %lld", (long long)-rank, (long long)rank, (long long)*axis);
    if (*axis < 0)
        *axis += rank;
    bool same = u->dims[0] == rows && u->dims[0] <= d->dims[0] && u->dims[*axis] <= d->dims[*axis];
    for (int64_t k = 1; same && k < rank; k++)
        same = k == *axis || u->dims[k] == d->dims[k];
    if (!same)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: updates: expected a dim 0 of "
                             "%lld (indices') within data's and data's other dims except axis %lld, got another shape",
                             (long long)rows, (long long)*axis);
    if (numel(i->dims, i->ndim) * fake_itemsize(i->dtype) + 224 > 192 * 1024)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclnnInplaceScatterUpdate: indices: expected their bytes + 224 "
                             "within the unified buffer's 192 KiB");
    return ACL_SUCCESS;
}

aclnnStatus aclnnInplaceScatterUpdateGetWorkspaceSize(aclTensor *data, const aclTensor *indices,
                                                      const aclTensor *updates, int64_t axis, uint64_t *workspaceSize,
                                                      aclOpExecutor **executor)
{
    int rc = need_tensor("InplaceScatterUpdate", "data", data, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("InplaceScatterUpdate", "indices", indices, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = need_tensor("InplaceScatterUpdate", "updates", updates, NUMBERS);
    if (rc == ACL_SUCCESS)
        rc = scatter_update_check(data, indices, updates, &axis);
    if (rc == ACL_SUCCESS)
        rc = need_outputs("InplaceScatterUpdate", workspaceSize, executor);
    if (rc != ACL_SUCCESS)
        return rc;
    aclOpExecutor *e = make("InplaceScatterUpdate", scatter_update_kernel, 0, workspaceSize, executor);
    bind(e, 0, indices, false);
    bind(e, 1, updates, false);
    bind(e, 0, data, true);
    e->call.integer[0] = axis;
    return ACL_SUCCESS;
}
LAUNCH(InplaceScatterUpdate)
