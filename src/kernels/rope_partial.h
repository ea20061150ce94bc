/* rope_partial.h: RoPE on the first rd dims of each head of D (partial
 * rotary: Qwen3.5 rotates 64 of 256), HF's rotate_half convention within
 * those dims (pairs (i, i + rd/2)); dims rd..D-1 pass through. Tables are
 * rope_tables(cos, sin, T, rd, ...): (T, rd/2) each. With rd == D this is
 * rope_forward / rope_backward. */
#ifndef LT_ROPE_PARTIAL_H
#define LT_ROPE_PARTIAL_H

/* In place on x (B, T, H, D). */
void rope_partial_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd);
/* In place on dx (B, T, H, D): the transpose rotation. */
void rope_partial_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd);
#endif
