/* codechat's functions in C (policy/cattn.py builds and loads them): the decode step's attention over a shared
   prompt KV and per-row generated KV, RMSNorm, silu x up and inverse-CDF sampling; the training forward's rotary
   and its gradient. fp32 math throughout (bf16 read and written with torch's roundings). */
#include <stdint.h>
#include <string.h>
#include <math.h>

/* e^y for y in [-87, 88]: 2^n p(r), |r| <= ln2 / 2 (Cephes' expf polynomial, ~1 ulp) */
static inline float exp_core(float y) {
    float n = __builtin_rintf(y * 1.44269504088896341f);
    float r = y - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

/* exp(x) for the softmax's x <= 0: 0 below -87 */
static inline float exp_neg(float x) {
    const float y = exp_core(x < -87.0f ? -87.0f : x);
    return x < -87.0f ? 0.0f : y;
}

/* e[i] = exp(x[i] - max x) for i < n (x and e may be the same array); returns their sum: softmax's numerators
   and denominator, the sum in [1, n] unless x holds a NaN or +inf or nothing above -inf */
static inline float exp_shifted(const float *x, float *e, int64_t n) {
    float m = -INFINITY, sum = 0.0f;
    #pragma omp simd reduction(max:m)
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    #pragma omp simd reduction(+:sum)
    for (int64_t i = 0; i < n; i++) {
        const float v = exp_neg(x[i] - m);
        e[i] = v;
        sum += v;
    }
    return sum;
}

/* element i of a row of the fused q/k/v projection's output: fp32, or bf16 (the top half of an fp32) */
static inline float load(const void *x, int bf16, int64_t i) {
    if (!bf16) return ((const float *)x)[i];
    uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16 bits, round to nearest even (as torch's conversion); NaN stays NaN */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline void store(void *y, int bf16, int64_t i, float f) {
    if (bf16) ((uint16_t *)y)[i] = to_bf16(f);
    else ((float *)y)[i] = f;
}

static inline float round_bf16(float f) {
    uint32_t u = (uint32_t)to_bf16(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* rotary as the lean step's torch ops compute it: x * cos + rotate_half(x) * sin */
static inline __attribute__((always_inline)) void rope(const void *x, int bf16, int64_t at, const float *cos,
                                                       const float *sin, const int64_t D, float *y) {
    const int64_t h = D / 2;
    if (!cos) {
        for (int64_t d = 0; d < D; d++) y[d] = load(x, bf16, at + d);
        return;
    }
    for (int64_t d = 0; d < h; d++) y[d] = load(x, bf16, at + d) * cos[d] - load(x, bf16, at + d + h) * sin[d];
    for (int64_t d = h; d < D; d++) y[d] = load(x, bf16, at + d) * cos[d] + load(x, bf16, at + d - h) * sin[d];
}

static inline __attribute__((always_inline)) int attend(
        const void *qkv, int64_t rs, int bf16, const float *cos, const float *sin,
        const float *Kp, const void *Vp, const float *pmask, int64_t P, int64_t Lp,
        float *Kg, void *Vg, const int vbf, int64_t Tcap, int64_t t, const int64_t *gstart, const int64_t *pidx,
        int64_t b0, int64_t b1, int64_t H, int64_t Hkv, const int64_t D, float scale, void *out, int obf, float *sc) {
    const int64_t grp = H / Hkv;
    float qq[D];
    for (int64_t b = b0; b < b1; b++) {
        const int64_t p = pidx[b], g0 = gstart ? gstart[b] : 0;
        if (p < 0 || p >= P || g0 < 0 || g0 > t) return 1;
        const float *cb = cos ? cos + b * D : 0, *sb = sin ? sin + b * D : 0;
        for (int64_t j = 0; j < Hkv; j++) {  /* this step's k (rotated) and v into generated column t */
            rope(qkv, bf16, b * rs + (H + j) * D, cb, sb, D, Kg + ((b * Hkv + j) * Tcap + t) * D);
            const int64_t vat = ((b * Hkv + j) * Tcap + t) * D, from = b * rs + (H + Hkv + j) * D;
            if (vbf && bf16)  /* bf16 v into a bf16 cache: the bits as they are */
                memcpy((uint16_t *)Vg + vat, (const uint16_t *)qkv + from, D * sizeof(uint16_t));
            else
                for (int64_t d = 0; d < D; d++) store(Vg, vbf, vat + d, load(qkv, bf16, from + d));
        }
        for (int64_t j = 0; j < Hkv; j++) {
            const float *kp = Kp + (p * Hkv + j) * Lp * D, *kg = Kg + (b * Hkv + j) * Tcap * D;
            const int64_t vp = (p * Hkv + j) * Lp * D, vg = (b * Hkv + j) * Tcap * D;  /* element offsets */
            const float *pm = pmask + p * Lp;
            const int64_t S = Lp + t - g0 + 1;
            for (int64_t g = 0; g < grp; g++) {
                const int64_t h = j * grp + g;
                rope(qkv, bf16, b * rs + h * D, cb, sb, D, qq);
                for (int64_t c = 0; c < Lp; c++) {
                    const float *kk = kp + c * D;
                    float acc = 0.0f;
                    #pragma omp simd reduction(+:acc)
                    for (int64_t d = 0; d < D; d++) acc += qq[d] * kk[d];
                    sc[c] = acc * scale + pm[c];  /* -inf on padding */
                }
                for (int64_t c = g0; c <= t; c++) {
                    const float *kk = kg + c * D;
                    float acc = 0.0f;
                    #pragma omp simd reduction(+:acc)
                    for (int64_t d = 0; d < D; d++) acc += qq[d] * kk[d];
                    sc[Lp + c - g0] = acc * scale;
                }
                const int64_t o = (b * H + h) * D;
                const float sum = exp_shifted(sc, sc, S);
                if (!(sum >= 1.0f && sum <= (float)S)) {  /* NaN or inf scores (or none): NaN out, as torch's */
                    for (int64_t d = 0; d < D; d++) store(out, obf, o + d, NAN);
                    continue;
                }
                float acc[D];
                for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
                for (int64_t c = 0; c < Lp; c++) {
                    const float w = sc[c];
                    if (w == 0.0f) continue;
                    const int64_t at = vp + c * D;
                    #pragma omp simd
                    for (int64_t d = 0; d < D; d++) acc[d] += w * load(Vp, vbf, at + d);
                }
                for (int64_t c = g0; c <= t; c++) {
                    const float w = sc[Lp + c - g0];
                    const int64_t at = vg + c * D;
                    #pragma omp simd
                    for (int64_t d = 0; d < D; d++) acc[d] += w * load(Vg, vbf, at + d);
                }
                const float inv = 1.0f / sum;
                for (int64_t d = 0; d < D; d++) store(out, obf, o + d, acc[d] * inv);
            }
        }
    }
    return 0;
}

/* Rows b0 <= b < b1. qkv: (B, (H + 2 Hkv) D) rows rs elements apart, fp32 or (bf16 != 0) bf16, q heads first;
   cos, sin (B, D) fp32 or NULL (no rotary); Kp (P, Hkv, Lp, D) fp32, Vp the same in fp32 or (vbf16) bf16;
   pmask (P, Lp) additive; Kg (B, Hkv, Tcap, D) fp32, Vg as Vp's dtype; gstart (B,) or NULL; pidx (B,); out
   (B, H, D) fp32 or (obf16) bf16; sc: Lp + Tcap floats of scratch. 0, or 1 when a row's prompt index or first
   column is out of range. */
int decode_attend(const void *qkv, int64_t rs, int bf16, const float *cos, const float *sin,
                  const float *Kp, const void *Vp, const float *pmask, int64_t P, int64_t Lp,
                  float *Kg, void *Vg, int vbf16, int64_t Tcap, int64_t t, const int64_t *gstart,
                  const int64_t *pidx, int64_t b0, int64_t b1, int64_t H, int64_t Hkv, int64_t D, float scale,
                  void *out, int obf16, float *sc) {
#define ATTEND(DD, VB) attend(qkv, rs, bf16, cos, sin, Kp, Vp, pmask, P, Lp, Kg, Vg, VB, Tcap, t, gstart, pidx, \
                              b0, b1, H, Hkv, DD, scale, out, obf16, sc)
    if (vbf16) switch (D) {
    case 64: return ATTEND(64, 1);
    case 128: return ATTEND(128, 1);
    default: return ATTEND(D, 1);
    }
    switch (D) {  /* the common head sizes as constants: the accumulator stays in registers */
    case 64: return ATTEND(64, 0);
    case 128: return ATTEND(128, 0);
    default: return ATTEND(D, 0);
    }
}

/* y = w * (x * rsqrt(mean(x^2) + eps)) per row, as torch's rms_norm in fp32; y fp32 or (bf16) bf16 */
void rms_norm(const float *x, const float *w, int64_t R, int64_t C, float eps, void *y, int bf16) {
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];
        const float rstd = 1.0f / sqrtf(ss / (float)C + eps);
        if (bf16) {
            uint16_t *yr = (uint16_t *)y + r * C;
            #pragma omp simd
            for (int64_t c = 0; c < C; c++) yr[c] = to_bf16(xr[c] * rstd * w[c]);
        } else {
            float *yr = (float *)y + r * C;
            #pragma omp simd
            for (int64_t c = 0; c < C; c++) yr[c] = xr[c] * rstd * w[c];
        }
    }
}

/* exp(x) over the floats' range: 0 below -87, inf above 88 */
static inline float exp_any(float x) {
    const float y = exp_core(x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x));
    return x < -87.0f ? 0.0f : (x > 88.0f ? INFINITY : y);
}

/* a = silu(g) * u for gu = [g, u] (R, 2I): fp32, or bf16 in and out with torch's roundings (silu's result
   rounded to bf16, then the product) */
void silu_mul(const void *gu, int64_t R, int64_t I, void *a, int bf16) {
    for (int64_t r = 0; r < R; r++) {
        if (bf16) {
            const uint16_t *g = (const uint16_t *)gu + r * 2 * I, *u = g + I;
            uint16_t *ar = (uint16_t *)a + r * I;
            #pragma omp simd
            for (int64_t i = 0; i < I; i++) {
                const float gf = load(g, 1, i), uf = load(u, 1, i);
                ar[i] = to_bf16(round_bf16(gf / (1.0f + exp_any(-gf))) * uf);
            }
        } else {
            const float *g = (const float *)gu + r * 2 * I, *u = g + I;
            float *ar = (float *)a + r * I;
            #pragma omp simd
            for (int64_t i = 0; i < I; i++) ar[i] = g[i] / (1.0f + exp_any(-g[i])) * u[i];
        }
    }
}

/* One token per row from its logits (B, V) fp32 (tempered and truncated: -inf = excluded) by the inverse CDF
   with the row's uniform u: the first token whose running sum of exp(x - max) exceeds u times the total (so never
   one of probability 0; the last token with mass if rounding leaves none), and its log-probability. */
void sample_rows(const float *logits, int64_t B, int64_t V, const float *u, float *e, int64_t *tok, float *logp) {
    for (int64_t b = 0; b < B; b++) {
        const float *x = logits + b * V;
        const float sum = exp_shifted(x, e, V);
        if (!(sum >= 1.0f && sum <= (float)V)) {  /* NaN or +inf logits, or none finite */
            tok[b] = 0;
            logp[b] = NAN;
            continue;
        }
        const float thr = u[b] * sum;
        float acc = 0.0f;
        int64_t t = -1;
        for (int64_t i0 = 0; i0 < V && t < 0; i0 += 256) {
            const int64_t i1 = i0 + 256 < V ? i0 + 256 : V;
            float bs = 0.0f;
            #pragma omp simd reduction(+:bs)
            for (int64_t i = i0; i < i1; i++) bs += e[i];
            if (acc + bs <= thr) {  /* not in this block (up to rounding: the scan below settles it) */
                acc += bs;
                continue;
            }
            for (int64_t i = i0; i < i1; i++) {
                acc += e[i];
                if (acc > thr && e[i] > 0.0f) { t = i; break; }
            }
        }
        if (t < 0)
            for (int64_t i = V - 1; i >= 0 && t < 0; i--)
                if (e[i] > 0.0f) t = i;
        tok[b] = t;
        logp[b] = logf(e[t] / sum);
    }
}

/* Rotary for the training forward, bit for bit as the torch ops x * cos + rotate_half(x) * sin compute it (x fp32
   or bf16, promoted to fp32: each product rounded, then the sum; no fused multiply-add). x (N, Hx, D), cos and
   sin (N, D) fp32 (a row's position), y (N, Hx, D) fp32. */
__attribute__((optimize("fp-contract=off")))
void rope_fwd(const void *x, int xbf, int64_t N, int64_t Hx, int64_t D, const float *cos, const float *sin,
              float *y) {
    const int64_t h = D / 2;
    for (int64_t n = 0; n < N; n++) {
        const float *c = cos + n * D, *s = sin + n * D;
        for (int64_t j = 0; j < Hx; j++) {
            const int64_t at = (n * Hx + j) * D;
            float *yr = y + at;
            #pragma omp simd
            for (int64_t d = 0; d < h; d++) {
                const float a = load(x, xbf, at + d) * c[d], b = -load(x, xbf, at + d + h) * s[d];
                yr[d] = a + b;
            }
            #pragma omp simd
            for (int64_t d = h; d < D; d++) {
                const float a = load(x, xbf, at + d) * c[d], b = load(x, xbf, at + d - h) * s[d];
                yr[d] = a + b;
            }
        }
    }
}

/* Its gradient as autograd computes it: g * cos and g * sin each rounded to x's dtype (the products' inputs
   were promoted), rotate_half's backward, then the two contributions summed in x's dtype. g (N, Hx, D) fp32. */
__attribute__((optimize("fp-contract=off")))
void rope_bwd(const float *g, int64_t N, int64_t Hx, int64_t D, const float *cos, const float *sin, void *gx,
              int xbf) {
    const int64_t h = D / 2;
    for (int64_t n = 0; n < N; n++) {
        const float *c = cos + n * D, *s = sin + n * D;
        for (int64_t j = 0; j < Hx; j++) {
            const int64_t at = (n * Hx + j) * D;
            const float *gr = g + at;
            #pragma omp simd
            for (int64_t d = 0; d < h; d++) {  /* x[d] feeds rotate_half's column d + h (sign +) */
                float r1 = gr[d] * c[d], r2 = gr[d + h] * s[d + h];
                if (xbf) { r1 = round_bf16(r1); r2 = round_bf16(r2); }
                store(gx, xbf, at + d, r1 + r2);
            }
            #pragma omp simd
            for (int64_t d = h; d < D; d++) {  /* x[d] feeds column d - h with sign - */
                float r1 = gr[d] * c[d], r2 = gr[d - h] * s[d - h];
                if (xbf) { r1 = round_bf16(r1); r2 = round_bf16(r2); }
                store(gx, xbf, at + d, r1 - r2);
            }
        }
    }
}
