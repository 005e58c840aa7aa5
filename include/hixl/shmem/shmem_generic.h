/* The OpenSHMEM 1.5 C11 type-generic names (shmem_put(dest, source, n, pe)
 * on any type of the standard's table, shmem_put(ctx, dest, ...) on a
 * context), for C11 and later; shmem.h includes this file, C++ does not see
 * it.  Each name is a macro that selects one of shmem.h's typed functions
 * with _Generic and calls it with the arguments as given, each evaluated
 * once.  A type outside the call's table fails to compile, naming
 * hixl_shmem_generic_no_such_type.
 *
 * How a name selects.  The standard's tables name typedefs beside the types
 * they stand for (int32_t is int here, size_t unsigned long), and one
 * _Generic may not name a type twice; so a selection is a chain of
 * _Generic, one a row of shmem.h's table, each passing what it does not
 * match to the next: the first row with the argument's type wins, and any
 * row of that type names a function of the same type.  The forms with a
 * context are chosen by the first argument's type: a shmem_ctx_t selects
 * on the second argument among the shmem_ctx_ functions, anything else on
 * the first among the others.  Both chains are compiled, only one is
 * taken, and the call itself is written once, after the selection. */
#ifndef HIXL_SHMEM_SHMEM_GENERIC_H_
#define HIXL_SHMEM_SHMEM_GENERIC_H_

#ifndef HIXL_SHMEM_SHMEM_H_
#error "include <shmem.h>, which includes shmem_generic.h"
#endif

/* What a chain ends in: called with any arguments, it does not compile. */
void hixl_shmem_generic_no_such_type(void);

/* The first and second arguments of a call (the ~ makes every call have
 * more arguments than these name, as C11 asks). */
#define HIXL_SHMEM_ARG1_(a, ...) a
#define HIXL_SHMEM_ARG2_(a, b, ...) b
#define HIXL_SHMEM_ARG1(...) HIXL_SHMEM_ARG1_(__VA_ARGS__, ~)
#define HIXL_SHMEM_ARG2(...) HIXL_SHMEM_ARG2_(__VA_ARGS__, ~)

/* One row of a chain: X(TYPE, TYPENAME, _OP, E) for a table's _WITH form,
 * E the argument that selects, _OP the name's end (with its underscore, so
 * that a program's macro named put or g cannot replace it).  The CONST
 * rows also take a pointer to const TYPE (a source: shmem_g, fetch). */
#define HIXL_SHMEM_GENERIC_ROW(T, N, OP, E) _Generic((E), T *: shmem_##N##OP, default:
#define HIXL_SHMEM_GENERIC_CTX_ROW(T, N, OP, E) _Generic((E), T *: shmem_ctx_##N##OP, default:
#define HIXL_SHMEM_GENERIC_CONST_ROW(T, N, OP, E) \
  _Generic((E), T *: shmem_##N##OP, const T *: shmem_##N##OP, default:
#define HIXL_SHMEM_GENERIC_CONST_CTX_ROW(T, N, OP, E) \
  _Generic((E), T *: shmem_ctx_##N##OP, const T *: shmem_ctx_##N##OP, default:
#define HIXL_SHMEM_GENERIC_CLOSE(T, N, OP, E) )

/* The function that TABLE's ROW chain selects for E (a designator, not yet
 * called). */
#define HIXL_SHMEM_GENERIC_SELECT(TABLE, ROW, OP, E) \
  TABLE##_WITH(ROW, OP, E) hixl_shmem_generic_no_such_type TABLE##_WITH(HIXL_SHMEM_GENERIC_CLOSE, ~, ~)

/* A name without a context form: select on argument ARG (ARG1 or ARG2),
 * then call. */
#define HIXL_SHMEM_GENERIC(TABLE, ROW, OP, ARG, ...) \
  HIXL_SHMEM_GENERIC_SELECT(TABLE, ROW, OP, ARG(__VA_ARGS__))(__VA_ARGS__)

/* A name with a context form. */
#define HIXL_SHMEM_GENERIC_CTX_(TABLE, ROW, CTX_ROW, OP, ...)                                     \
  _Generic((HIXL_SHMEM_ARG1(__VA_ARGS__)), shmem_ctx_t                                            \
           : HIXL_SHMEM_GENERIC_SELECT(TABLE, CTX_ROW, OP, HIXL_SHMEM_ARG2(__VA_ARGS__)), default \
           : HIXL_SHMEM_GENERIC_SELECT(TABLE, ROW, OP, HIXL_SHMEM_ARG1(__VA_ARGS__)))(__VA_ARGS__)
#define HIXL_SHMEM_GENERIC_CTX(TABLE, OP, ...) \
  HIXL_SHMEM_GENERIC_CTX_(TABLE, HIXL_SHMEM_GENERIC_ROW, HIXL_SHMEM_GENERIC_CTX_ROW, OP, __VA_ARGS__)
#define HIXL_SHMEM_GENERIC_CTX_CONST(TABLE, OP, ...) \
  HIXL_SHMEM_GENERIC_CTX_(TABLE, HIXL_SHMEM_GENERIC_CONST_ROW, HIXL_SHMEM_GENERIC_CONST_CTX_ROW, OP, __VA_ARGS__)

/* ---- RMA: the standard RMA types. */
#define shmem_put(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _put, __VA_ARGS__)
#define shmem_get(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _get, __VA_ARGS__)
#define shmem_p(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _p, __VA_ARGS__)
#define shmem_g(...) HIXL_SHMEM_GENERIC_CTX_CONST(HIXL_SHMEM_RMA_TYPES, _g, __VA_ARGS__)
#define shmem_iput(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _iput, __VA_ARGS__)
#define shmem_iget(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _iget, __VA_ARGS__)
#define shmem_put_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _put_nbi, __VA_ARGS__)
#define shmem_get_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _get_nbi, __VA_ARGS__)
#define shmem_put_signal(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _put_signal, __VA_ARGS__)
#define shmem_put_signal_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_RMA_TYPES, _put_signal_nbi, __VA_ARGS__)

/* ---- Atomics: the standard AMO types ... */
#define shmem_atomic_compare_swap(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_compare_swap, __VA_ARGS__)
#define shmem_atomic_fetch_inc(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_fetch_inc, __VA_ARGS__)
#define shmem_atomic_inc(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_inc, __VA_ARGS__)
#define shmem_atomic_fetch_add(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_fetch_add, __VA_ARGS__)
#define shmem_atomic_add(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_add, __VA_ARGS__)
#define shmem_atomic_compare_swap_nbi(...) \
  HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_compare_swap_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_inc_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_fetch_inc_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_add_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_AMO_TYPES, _atomic_fetch_add_nbi, __VA_ARGS__)
/* ... the extended ones (a fetch's source may be const) ... */
#define shmem_atomic_fetch(...) HIXL_SHMEM_GENERIC_CTX_CONST(HIXL_SHMEM_EXT_AMO_TYPES, _atomic_fetch, __VA_ARGS__)
#define shmem_atomic_set(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_EXT_AMO_TYPES, _atomic_set, __VA_ARGS__)
#define shmem_atomic_swap(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_EXT_AMO_TYPES, _atomic_swap, __VA_ARGS__)
#define shmem_atomic_fetch_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_EXT_AMO_TYPES, _atomic_fetch_nbi, __VA_ARGS__)
#define shmem_atomic_swap_nbi(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_EXT_AMO_TYPES, _atomic_swap_nbi, __VA_ARGS__)
/* ... and the bitwise ones. */
#define shmem_atomic_fetch_and(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_and, __VA_ARGS__)
#define shmem_atomic_fetch_or(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_or, __VA_ARGS__)
#define shmem_atomic_fetch_xor(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_xor, __VA_ARGS__)
#define shmem_atomic_and(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_and, __VA_ARGS__)
#define shmem_atomic_or(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_or, __VA_ARGS__)
#define shmem_atomic_xor(...) HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_xor, __VA_ARGS__)
#define shmem_atomic_fetch_and_nbi(...) \
  HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_and_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_or_nbi(...) \
  HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_or_nbi, __VA_ARGS__)
#define shmem_atomic_fetch_xor_nbi(...) \
  HIXL_SHMEM_GENERIC_CTX(HIXL_SHMEM_BITWISE_AMO_TYPES, _atomic_fetch_xor_nbi, __VA_ARGS__)

/* The atomics' generic names before 1.4 (deprecated; no context form):
 * int, long, long long, and float and double for swap, fetch and set. */
#define shmem_cswap(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _cswap, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_finc(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _finc, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_inc(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _inc, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_fadd(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _fadd, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_add(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _add, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_fetch(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_EXT_AMO_TYPES, HIXL_SHMEM_GENERIC_CONST_ROW, _fetch, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_set(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_EXT_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _set, HIXL_SHMEM_ARG1, __VA_ARGS__)
/* shmem_swap(long *, long, int), the function, is this macro's long row. */
#define shmem_swap(...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_OLD_EXT_AMO_TYPES, HIXL_SHMEM_GENERIC_ROW, _swap, HIXL_SHMEM_ARG1, __VA_ARGS__)

/* ---- Point-to-point synchronisation: the point-to-point types.
 * shmem_wait_until(long *, int, long), the deprecated function, is this
 * macro's long row. */
#define HIXL_SHMEM_GENERIC_P2P(OP, ...) \
  HIXL_SHMEM_GENERIC(HIXL_SHMEM_P2P_TYPES, HIXL_SHMEM_GENERIC_ROW, OP, HIXL_SHMEM_ARG1, __VA_ARGS__)
#define shmem_wait_until(...) HIXL_SHMEM_GENERIC_P2P(_wait_until, __VA_ARGS__)
#define shmem_wait_until_all(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_all, __VA_ARGS__)
#define shmem_wait_until_any(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_any, __VA_ARGS__)
#define shmem_wait_until_some(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_some, __VA_ARGS__)
#define shmem_wait_until_all_vector(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_all_vector, __VA_ARGS__)
#define shmem_wait_until_any_vector(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_any_vector, __VA_ARGS__)
#define shmem_wait_until_some_vector(...) HIXL_SHMEM_GENERIC_P2P(_wait_until_some_vector, __VA_ARGS__)
#define shmem_test(...) HIXL_SHMEM_GENERIC_P2P(_test, __VA_ARGS__)
#define shmem_test_all(...) HIXL_SHMEM_GENERIC_P2P(_test_all, __VA_ARGS__)
#define shmem_test_any(...) HIXL_SHMEM_GENERIC_P2P(_test_any, __VA_ARGS__)
#define shmem_test_some(...) HIXL_SHMEM_GENERIC_P2P(_test_some, __VA_ARGS__)
#define shmem_test_all_vector(...) HIXL_SHMEM_GENERIC_P2P(_test_all_vector, __VA_ARGS__)
#define shmem_test_any_vector(...) HIXL_SHMEM_GENERIC_P2P(_test_any_vector, __VA_ARGS__)
#define shmem_test_some_vector(...) HIXL_SHMEM_GENERIC_P2P(_test_some_vector, __VA_ARGS__)

/* ---- Collectives on teams: selected by dest, the second argument. */
#define HIXL_SHMEM_GENERIC_TEAM(TABLE, OP, ...) \
  HIXL_SHMEM_GENERIC(TABLE, HIXL_SHMEM_GENERIC_ROW, OP, HIXL_SHMEM_ARG2, __VA_ARGS__)
#define shmem_broadcast(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_RMA_TYPES, _broadcast, __VA_ARGS__)
#define shmem_collect(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_RMA_TYPES, _collect, __VA_ARGS__)
#define shmem_fcollect(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_RMA_TYPES, _fcollect, __VA_ARGS__)
#define shmem_alltoall(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_RMA_TYPES, _alltoall, __VA_ARGS__)
#define shmem_alltoalls(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_RMA_TYPES, _alltoalls, __VA_ARGS__)
/* Sums and products also take the complex types. */
#define HIXL_SHMEM_GENERIC_ARITH_TYPES_WITH(X, A, B) \
  HIXL_SHMEM_REDUCE_ARITH_TYPES_WITH(X, A, B) HIXL_SHMEM_REDUCE_COMPLEX_TYPES_WITH(X, A, B)
#define shmem_and_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_REDUCE_BITWISE_TYPES, _and_reduce, __VA_ARGS__)
#define shmem_or_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_REDUCE_BITWISE_TYPES, _or_reduce, __VA_ARGS__)
#define shmem_xor_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_REDUCE_BITWISE_TYPES, _xor_reduce, __VA_ARGS__)
#define shmem_min_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_REDUCE_MINMAX_TYPES, _min_reduce, __VA_ARGS__)
#define shmem_max_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_REDUCE_MINMAX_TYPES, _max_reduce, __VA_ARGS__)
#define shmem_sum_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_GENERIC_ARITH_TYPES, _sum_reduce, __VA_ARGS__)
#define shmem_prod_reduce(...) HIXL_SHMEM_GENERIC_TEAM(HIXL_SHMEM_GENERIC_ARITH_TYPES, _prod_reduce, __VA_ARGS__)

#endif /* HIXL_SHMEM_SHMEM_GENERIC_H_ */
