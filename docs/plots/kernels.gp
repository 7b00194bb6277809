# gnuplot script written by tlm bench kernels: gnuplot kernels.gp (in this folder)
do for [fmt in "png svg"] {
  if (fmt eq "png") { set terminal pngcairo size 1200,600 } else { set terminal svg size 1200,600 }
  set output "kernels_speed.".fmt
  set title "Speed per task relative to Search-1000 (1 = equal, higher is faster)"
  set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8
  set xtics rotate by -45 font ",8"; set yrange [0:*]; set grid ytics; unset logscale
  plot "kernels_speed.dat" using 3:xtic(2) title "TLM-1", '' using 4 title "rule", '' using 5 title "Search-64", '' using 6 title "oneDNN"
  set output "kernels_tradeoff.".fmt
  set title "Kernel speed against time to a runnable kernel"
  set style data points; set logscale x; set xlabel "time to kernel (ms)"; set ylabel "GFLOPS"; set xtics auto norotate font ",10"; set yrange [0:*]
  plot "kernels_tradeoff.dat" index 0 title "TLM-1" pt 7, '' index 1 title "rule" pt 5, '' index 2 title "Search-64" pt 9, '' index 3 title "Search-1000" pt 11, '' index 4 title "oneDNN (primitive creation)" pt 13
  unset logscale; unset xlabel; unset ylabel
}
