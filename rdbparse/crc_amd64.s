#include "textflag.h"

// func cpuidECX(leaf uint32) uint32
TEXT ·cpuidECX(SB), NOSPLIT, $0-12
	MOVL leaf+0(FP), AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+8(FP)
	RET

// func crcFoldPCLMUL(crc uint64, p []byte, k *[4]uint64) (lo, hi uint64)
//
// Four 128-bit remainders, one per 16-byte column of each 64-byte block,
// each moved ahead 64 bytes per block: lo·k[0] ^ hi·k[1] ^ next. Then they
// are folded into one, 16 bytes at a time, with k[2], k[3].
TEXT ·crcFoldPCLMUL(SB), NOSPLIT, $0-56
	MOVQ crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVQ  AX, X4
	PXOR  X4, X0
	MOVOU 0(DX), X5
	MOVOU 16(DX), X6
	ADDQ  $64, SI
	SUBQ  $64, CX

loop:
	CMPQ CX, $64
	JB   combine

	MOVOU     X0, X7
	PCLMULQDQ $0x00, X5, X0
	PCLMULQDQ $0x11, X5, X7
	MOVOU     0(SI), X8
	PXOR      X7, X0
	PXOR      X8, X0

	MOVOU     X1, X9
	PCLMULQDQ $0x00, X5, X1
	PCLMULQDQ $0x11, X5, X9
	MOVOU     16(SI), X10
	PXOR      X9, X1
	PXOR      X10, X1

	MOVOU     X2, X11
	PCLMULQDQ $0x00, X5, X2
	PCLMULQDQ $0x11, X5, X11
	MOVOU     32(SI), X12
	PXOR      X11, X2
	PXOR      X12, X2

	MOVOU     X3, X13
	PCLMULQDQ $0x00, X5, X3
	PCLMULQDQ $0x11, X5, X13
	MOVOU     48(SI), X14
	PXOR      X13, X3
	PXOR      X14, X3

	ADDQ $64, SI
	SUBQ $64, CX
	JMP  loop

combine:
	MOVOU     X0, X7
	PCLMULQDQ $0x00, X6, X0
	PCLMULQDQ $0x11, X6, X7
	PXOR      X7, X0
	PXOR      X0, X1

	MOVOU     X1, X7
	PCLMULQDQ $0x00, X6, X1
	PCLMULQDQ $0x11, X6, X7
	PXOR      X7, X1
	PXOR      X1, X2

	MOVOU     X2, X7
	PCLMULQDQ $0x00, X6, X2
	PCLMULQDQ $0x11, X6, X7
	PXOR      X7, X2
	PXOR      X2, X3

	MOVQ   X3, AX
	PSRLDQ $8, X3
	MOVQ   X3, BX
	MOVQ   AX, lo+40(FP)
	MOVQ   BX, hi+48(FP)
	RET
