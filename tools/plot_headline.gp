# plot_headline.gp - the README's headline comparison: prefill TFLOP/s against n for clflash and the
# backends it is measured beside in the same run, without and with causal masking, as one PNG.
#
#   gnuplot -c tools/plot_headline.gp docs/performance/h200_prefill.dat docs/h200_prefill.png "subtitle"
#
# The data file has one row per n: n, then TFLOP/s of clflash, FlashAttention-2, cuDNN and
# flex_attention without causal masking, then the same four with it ('-' where a backend did not
# run); '#' lines are comments (the date, device, commit and commands of the measurement). Needs
# gnuplot 5 with the pngcairo terminal.

if (ARGC < 2) {
    print "usage: gnuplot -c plot_headline.gp DATA OUT.png [SUBTITLE]"
    exit status 2
}
data = ARG1
subtitle = ARGC >= 3 ? ARG3 : ""

set datafile missing "-"
set terminal pngcairo size 1100,460 enhanced font ",11"
set output ARG2
set logscale x 2
set format x "%.0f"
set grid xtics ytics lc rgb "#dddddd"
set key bottom right box opaque
set xlabel "sequence length n (batch x n = 16384 tokens)"
set ylabel "TFLOP/s"
set yrange [0:*]
set style data linespoints

names = "clflash FlashAttention-2 cuDNN flex\\_attention"
colours = "#1b9e77 #7570b3 #d95f02 #e7298a"
set multiplot layout 1,2 title "Prefill attention, f16, d = 128, 16 heads".(subtitle ne "" ? "\n{/*0.85 ".subtitle."}" : "")
do for [panel = 0:1] {
    set title panel == 0 ? "no mask" : "causal"
    plot for [i = 1:4] data using 1:(column(1 + 4 * panel + i)) title word(names, i) \
         lc rgb word(colours, i) lw (i == 1 ? 3 : 1.5) pt 7 ps 0.8
}
unset multiplot
