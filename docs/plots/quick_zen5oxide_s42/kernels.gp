# gnuplot script written by tlm bench kernels: gnuplot kernels.gp (in this folder)
peak = 224.268  # measured FMA GFLOPS of the threads used
bw = 29.161    # measured read GB/s
do for [fmt in "png svg"] {
  if (fmt eq "png") { set terminal pngcairo size 1200,600 } else { set terminal svg size 1200,600 }
  set output "kernels_speed.".fmt
  set title "Speed per task relative to Search-1000 (1 = equal, higher is faster)"
  set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8
  set xtics rotate by -45 font ",8"; set yrange [0:*]; set grid ytics; unset logscale
  plot "kernels_speed.dat" using 3:xtic(2) title "TLM-1", '' using 4 title "TLM-10 (measured)", '' using 5 title "rule", '' using 6 title "Search-64", '' using 7 title "oneDNN", '' using 8 title "OpenBLAS", '' using 9 title "LIBXSMM"
  set output "kernels_tradeoff.".fmt
  set title "Kernel speed against time to a runnable kernel"
  set style data points; set logscale x; set xlabel "time to kernel (ms)"; set ylabel "GFLOPS"; set xtics auto norotate font ",10"; set yrange [0:*]
  plot "kernels_tradeoff.dat" index 0 title "TLM-1" pt 5, '' index 1 title "TLM-10 (measured)" pt 7, '' index 2 title "rule" pt 9, '' index 3 title "Search-64" pt 11, '' index 4 title "Search-1000" pt 13, '' index 5 title "oneDNN (primitive creation)" pt 15, '' index 6 title "OpenBLAS (first call)" pt 17, '' index 7 title "LIBXSMM (dispatch)" pt 19
  set output "kernels_roofline.".fmt
  set title sprintf("Roofline: FMA peak %.0f GFLOPS, read bandwidth %.1f GB/s", peak, bw)
  set logscale xy; set xlabel "arithmetic intensity (FLOP per byte moved once)"; set yrange [*:*]; set xrange [0.05:5000]
  plot (x * bw < peak ? x * bw : peak) title "roof" lw 2 lc rgb "black", "kernels_roofline.dat" index 0 title "TLM-1" pt 5, "kernels_roofline.dat" index 1 title "TLM-10 (measured)" pt 7, "kernels_roofline.dat" index 2 title "rule" pt 9, "kernels_roofline.dat" index 3 title "Search-64" pt 11, "kernels_roofline.dat" index 4 title "Search-1000" pt 13, "kernels_roofline.dat" index 5 title "oneDNN" pt 15, "kernels_roofline.dat" index 6 title "OpenBLAS" pt 17, "kernels_roofline.dat" index 7 title "LIBXSMM" pt 19
  unset logscale; unset xlabel; unset ylabel
}
