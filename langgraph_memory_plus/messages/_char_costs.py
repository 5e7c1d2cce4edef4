"""What a character of U+0800-FFFF costs alone, at most, in the tokenizers the estimate covers.

CJK ideographs, kana and Hangul syllables are one token each for a few hundred common
characters in every vocabulary, but cl100k spells most of them in two or three byte
pieces, and so do the others for rare ones (names use rare ones). One rate per script
would be too low for those or far too high for the rest, so the estimate charges each
character what it costs on its own in the costliest of o200k, cl100k, Qwen (both tables)
and DeepSeek V4: :data:`TABLE`, one byte per code point, built from their vocabularies by
``python -m benchmarks.token_budgets --write-table``. A run of such characters costs no
more than its characters one by one in those tokenizers (merges only join pieces); the
corpus tests hold the estimate to that.

The classes are counted with three regular expressions (built on first use from the
table), each over what the one before found, so the common one-token characters are
only scanned past.
"""

from __future__ import annotations

import base64
import re
import zlib
from functools import cache

FIRST = 0x800
"""The table's first code point; it runs to U+FFFF."""
MORE = 6
"""What class 4 costs: the few characters Qwen's NFC normalization spreads over 4-6 tokens."""

TABLE = (
    "c-rk<iL$F844squ|KI%P^;V0D2qa;#CwHdP-l{<M4f=Yu1$m7F|K}nCIRVZevAzC%3H-eRhf6-NjbQ|cP7V8iALjj9#B"
    "BTk7Rh<+vb^4x4h}U8DG5H_{eQ`LmX<AW&9{WcFeCo)W+4QOgtu1vdwGA7;1X=#esBL=)n)lw6JVnc!*_?5*j3B2eT?X"
    "cW&iH*QlMK}AfTC@e$Vx+XlI!Jj37TUJ2HSDWrQ+AAl@D9FNSfTW{>{~1o9N=B@gEXah#jxSy>q_1nJjfIy6ko#{SM%x"
    "tqV4bimQ6SaUmTl4nI+Kn@&o&&`r%D9zu>J)uTR>TMN;M($hh_0D3iY1b{|mvQJ1*z!BH_aXOrup3^117u%>Tlz}}dpm"
    "m>Cu{L?{Rxc!2@i$Ei3zgn|Ae2;*D(GkPmK;={}&%9^@Fxl%bG4&pYwVDNhxeug=6!{C&Pem!^tTk-X8PUYqE~9e!1Pf"
    "<u5+nDBE4Z9YO90F7fj-`VWM%%4sVn#`-^jcqcIaCy>7hjQ<(`lcxy7;FW}8{7+Id{wFUH?*zvG1Oj=A^!lOrAK$j_wY"
    "3|^qb0VoDNg0n!!ZI^t#rt05XAl%ldvTc=Pt!#Q(<@l!EQ1*&jR6*F3E#6P|^j7;MR50`R$X4eg|bUDhfIqVcYu&qxyH"
    "j{(rQtzo)xf4-C9<2cpOLpy^pI$xe^6Y#>}GT5OeA`#Z`X4N)?3PD3=Jq8~YxCu4S~SxKN}0`-ZA{@dx;m@W;Fjg)>)%"
    "?HVeUp+RIrJ7!3K_hXg>fUd@e?~_2py1>$-DzFu_C1^k3q$jKpdVi9^}|s~?rm9{tugSE)Yy`caGaoCzr<LmgzS>0KMe"
    "Fo*C3`#O;Xwaf8`aRl#da+2NyaDWq$pw9An4lC=j6HU1+csaV?9?zW+bZM@@#AXr#<zse-s0TCfXJtA-I1Bq${dWdak4"
    "aY_QLn3Dq&LgLPB>e(h&j*yD~VayZ-Yuw9XBUK=N`UA*Xc1(a#&KJnDA8=Gi$cWg@SgLX%1wLo#GPG>gC(OQ>zm$te-3"
    "$<<M9T1v+yu~_+lS0d*7bic^E_pe=$e^pCXqmz3g@GPvPh4cB0v)1aFiQu#uP?#)!Hw^{ELJCoin}+6;D(p?k0}^b&`="
    "~&rzNXsGbwl1E6%(3IsvFR&|BN6;t^$>}nW?$jlDpASms}FZBRvNn2h2M+UMj&i}g!P@fk6*XQ)=GAq3i(E9v8iQ^w;c"
    "ve;dwE9oe|1XBfHS+%ueRC1j)i^uG3?>8X|C}76vjc&14hBitLPP(-k9N4`5kX7(qly1jRL4~@8al50B4LDVEp)cX<<<"
    "pGf~tRDyf3UW6IL7)>*^n=${WU!pGy4?%av%gVl{<~@h^=-1~D8!-1!H&1q;Z2y8@c)CY6#vd-+9df5eaEaA14>UXS>{"
    "x4W(94)h&<!2Dqe2aGoV+2ViC+)jtcz4dYKrstnZSJZXLowr&>;{1QhA5cawwTtHZ*DN!0(_@*Ly+w6t5v{E<Z0}X;1m"
    "pgH-|YO6T`qzg9HJxa_az>-CPN05&0(U1<H_MSiL}~WRS)lXqM`%*O|V=3B3@{NHsKU0Pkpz1Ag8SqNSY16U^n#$$|Pt"
    "1u|Aj5GydOx>%heS8QZ5etp7KT-(@re7!Oh!|Cfm^>`i+`9muhI=eFi>y8?7-6D8#;{|btTrf%u){32I>w2J@X(Ep`E3"
    "$E(64gBKXhD__{^fm&P__uWM;b`Re`+tuB@unBg|My3y)<x@0_sQ+oq){K0HBmzr@Wv<4|0fXdgjsxI;*RiZG(w^n?RV"
    ";0eb%e=*uzvBA3*?B-Fv27yPDsWbm(2&eWJKhPwV+NS5LU_{~xjbAkVR5S+s|PU0H2FC;e-w|2<08xw~6?$NxEN@U(Ge"
    "GDD;BbEre5{cGMmSG$W6ZS<dJnmzoNqkgqI+tp?LVqm`w?EBR<J(S0K9`y*isCQewmH*Omo4`&lInpiXncB72&c$l~%I"
    "no((;@wl$H)KKF$u~#RW0@mc-i6}{!7X?9fkh2hoxq1UZDuO=|1@ZeXUV59{1&ZheqRh>0Jz<cVqb_6yR)kA8ul1IM$C"
    "6`-gMzT$S^fApg=ke_)-bwW1&4S-$^_{12P)hxq+JtzFW_|Gn~`tpERJ{9Z%<==uL*BR^VuyT?T%mUwvmzoq{&Y5&r&D"
    "yHlCf1TogO>Ahqcxf$v+L**5=g9N_2m}IwKp+qvnrmR9h5;tmISoF!|DQm-6Go*K`G!EABE5c5*9m!^I)L#%f$=|q@jr"
    "QqcqcIaCpf~=V2EYeUd@>x=c(kWIrUMm{{P<bzqVz%;W|Br*?yepy;t}EH9ss=wOQQ#z>Dku{{vWal1~"
)
"""zlib, then base85: one byte per code point from :data:`FIRST`, its class: the tokens it
costs alone (1-3), or 4 for more than 3 (charged :data:`MORE`). Surrogates count 3."""


TWO_BYTE_DEAR = (
    "\u0080-\u009f\u00b8\u00c5-\u00c6\u00c8\u00ca-\u00cc\u00cf"
    "\u00d2\u00d4-\u00d5\u00d8-\u00d9\u00db\u00dd-\u00de\u00f7"
    "\u00fe-\u0100\u0102\u0104\u0106\u0108-\u010c\u010e-\u010f"
    "\u0112\u0114-\u0118\u011a\u011c-\u011e\u0120-\u012a\u012c-\u012f"
    "\u0132-\u0141\u0143\u0145-\u014c\u014e-\u0150\u0152\u0154-\u0158"
    "\u015a\u015c-\u015e\u0160\u0162\u0164\u0166-\u016a"
    "\u016c-\u016e\u0170\u0172-\u0179\u017b\u017d\u017f-\u01a0"
    "\u01a2-\u01af\u01b1-\u0218\u021a\u021c-\u0258\u025a-\u02ff\u0302-\u03ab"
    "\u03b0\u03b6\u03be\u03c8\u03ca-\u03cb\u03cd-\u040f"
    "\u0416\u0419\u0425\u0428-\u042c\u042e\u0450"
    "\u0452-\u0455\u0457-\u05cf\u05d2\u05d6\u05d8\u05da-\u05db"
    "\u05dd\u05df\u05e1\u05e3-\u05e7\u05eb-\u060b\u060d-\u0622"
    "\u0624\u0626\u063b-\u0640\u064b-\u064d\u0653-\u067d\u067f-\u06a8"
    "\u06aa-\u06ae\u06b0-\u06cb\u06cd-\u07ff"
)
"""Regular-expression ranges of the characters of U+0080-07FF that cost two tokens alone
in the costliest tokenizer (most letters of Hebrew, Arabic, Armenian, upper-case and
accented Latin, Greek and Cyrillic, every combining mark; built like :data:`TABLE`)."""
TWO_BYTE_DEARER = "\u0344"
"""The ones of them that cost three (what Qwen's NFC normalization spreads)."""


def table() -> bytes:
    """The decoded table."""
    return zlib.decompress(base64.b85decode(TABLE))


@cache
def _two_byte() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Runs of characters of U+0080-07FF that cost two tokens or more, and three."""
    return re.compile(f"[{TWO_BYTE_DEAR}]+"), re.compile(f"[{TWO_BYTE_DEARER}]")


def two_byte_extra(text: str) -> int:
    """Tokens the characters of U+0080-07FF in ``text`` cost beyond one each: letters
    most vocabularies hold whole cost one, the others (Hebrew, Armenian, upper-case
    accented Latin, combining marks...) two, as their two UTF-8 bytes."""
    dear, dearer = _two_byte()
    costly = "".join(dear.findall(text))
    return len(costly) + (len(dearer.findall(costly)) if costly else 0)


@cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Runs of characters of class >= 2, >= 3 and 4."""
    costs = table()

    def runs_of(least: int) -> re.Pattern[str]:
        parts: list[str] = []
        start = None
        for i, cost in enumerate([*costs, 0]):
            if cost >= least and start is None:
                start = i
            elif cost < least and start is not None:
                parts.append(f"{chr(FIRST + start)}-{chr(FIRST + i - 1)}")
                start = None
        return re.compile(f"[{''.join(parts)}]+")

    return runs_of(2), runs_of(3), runs_of(4)


def extra_tokens(text: str) -> int:
    """Tokens the characters of U+0800-FFFF in ``text`` cost beyond one each."""
    at_least_2, at_least_3, more = _patterns()
    costly = "".join(at_least_2.findall(text))
    if not costly:
        return 0
    dear = "".join(at_least_3.findall(costly))
    if not dear:
        return len(costly)
    return len(costly) + len(dear) + (MORE - 3) * len("".join(more.findall(dear)))
