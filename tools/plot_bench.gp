# plot_bench.gp - turns clflash-bench's CSV into two log-log PNGs, one line per algorithm
# (flash, naive, blas, whichever the CSV holds; failed rows are left out):
#   <prefix>_time.png    median time per call against n
#   <prefix>_memory.png  memory each algorithm needs beyond Q, K, V and O against n: the score
#                        matrices naive writes to device memory (temp_bytes), the one fp32 score
#                        matrix blas keeps on the host (temp_bytes), and the one tile flash keeps
#                        in local memory per work-group (tile_bytes: it does not grow with n)
#
#   clflash-bench --csv --seq 256,512,1024,2048,4096 --algo flash,naive,blas > bench.csv
#   gnuplot -c tools/plot_bench.gp bench.csv docs/pocl "PoCL, 2 cores, d = 64, f32, 2 heads"
#
# The third argument, optional, is put under each title (device and shape, say). Needs gnuplot 5.4
# or later (column names from the CSV's header row); uses the pngcairo terminal.

if (ARGC < 2) {
    print "usage: gnuplot -c plot_bench.gp BENCH.csv OUT_PREFIX [SUBTITLE]"
    exit status 2
}
csv = ARG1
prefix = ARG2
subtitle = ARGC >= 3 ? ARG3 : ""

set datafile separator comma
set datafile columnheaders
set datafile missing NaN   # a NaN from on() below is a missing point: the line joins across it
set terminal pngcairo size 960,640 enhanced font ",11"
set logscale xy 2
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set key top left box opaque
set xlabel "sequence length n"
set format x "%.0f"
set style data linespoints
set offsets 0, 0, graph 0.05, graph 0.05   # keep the lowest and highest lines off the border

algos = "flash naive blas"
colour(a) = a eq "flash" ? "#1b9e77" : a eq "naive" ? "#d95f02" : "#7570b3"
# The value of column `col` on the rows of algorithm `a` that ran, NaN elsewhere (left out);
# "smooth unique" sorts the points that remain by n.
on(a, col) = (strcol("algo") eq a && strcol("status") eq "ok") ? column(col) : NaN
ok_any(a, col) = strcol("algo") eq a ? column(col) : NaN

set output prefix . "_time.png"
set title "clflash-bench: median time per call" . (subtitle eq "" ? "" : "\n{/*0.8 " . subtitle . "}")
set ylabel "milliseconds (log)"
plot for [a in algos] csv using (on(a, "seq")):(on(a, "ms_median")) \
     smooth unique with linespoints lw 2 pt 7 lc rgb colour(a) title a

set output prefix . "_memory.png"
set title "Memory beyond Q, K, V, O: score matrices against flash's one tile" . \
          (subtitle eq "" ? "" : "\n{/*0.8 " . subtitle . "}")
set ylabel "bytes (log)"
set format y "%.0b %BB"
plot csv using (ok_any("naive", "seq")):(ok_any("naive", "temp_bytes")) \
         smooth unique with linespoints lw 2 pt 7 lc rgb colour("naive") title "naive: score matrices (device)", \
     csv using (ok_any("blas", "seq")):(ok_any("blas", "temp_bytes")) \
         smooth unique with linespoints lw 2 pt 5 lc rgb colour("blas") title "blas: one head's fp32 scores (host)", \
     csv using (ok_any("flash", "seq")):(ok_any("flash", "tile_bytes")) \
         smooth unique with linespoints lw 2 pt 9 lc rgb colour("flash") title "flash: one tile in local memory"
set output
