#pragma once
// timeline.html: one self-contained page (inline CSS/JS, no network). Headline numbers and the
// verdict on top; below, an SVG time axis with the steps, the phases and one lane of kernels per
// stream. Mouse wheel zooms around the pointer, dragging pans, double-click resets. Steps and phases
// are <rect class="step" data-step=…> / <rect class="phase" data-phase=…> so tests can count them;
// a JS error writes <div id="js-error"> into the page, a finished render adds <div id="render-ok">.
#include <libreyolo/core/api.hpp>
#include <libreyolo/profile/events.hpp>

#include <cmath>
#include <map>
#include <string>

namespace libreyolo::profile {

namespace detail {
LIBREYOLO_INLINE double rounded_ms(int64_t ns, int64_t t0);

// The page's data: times in ms from the first step, kernel names interned.
LIBREYOLO_INLINE nlohmann::json timeline_data(const WindowRecord& rec, const nlohmann::json& profile);

inline constexpr const char* timeline_css = R"CSS(
body{font:13px/1.4 system-ui,sans-serif;margin:12px;color:#222;background:#fafafa}
h1{font-size:18px;margin:0 0 6px}
#verdict{font-size:16px;font-weight:600;padding:6px 10px;border-radius:4px;background:#fff3cd;display:inline-block}
#why{margin:4px 0 8px;color:#444}
#numbers{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0 10px}
#numbers div{background:#fff;border:1px solid #ddd;border-radius:4px;padding:4px 8px}
#numbers b{display:block;font-size:15px}
#notes{color:#8a4b00;margin:4px 0}
#legend span{display:inline-block;margin-right:12px}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
svg{background:#fff;border:1px solid #ccc;cursor:grab;user-select:none}
.lane-label{font-size:12px;fill:#333}
.tick{font-size:10px;fill:#666}
#tables{display:flex;flex-wrap:wrap;gap:18px;margin:10px 0}
#tables table{border-collapse:collapse;background:#fff;border:1px solid #ddd}
#tables caption{text-align:left;font-weight:600;padding:2px 0}
#tables td,#tables th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
#tables td:first-child,#tables th:first-child{text-align:left}
#tables .bar{display:inline-block;height:8px;background:#4e79a7;margin-right:4px;vertical-align:0}
.muted{color:#777}
)CSS";

inline constexpr const char* timeline_js = R"JS(
window.onerror=function(msg,src,line){var d=document.createElement('div');d.id='js-error';
 d.textContent='JS error: '+msg+' (line '+line+')';document.body.appendChild(d);};
(function(){
var D=JSON.parse(document.getElementById('data').textContent);
var NS='http://www.w3.org/2000/svg';
var PHASE_COLOR={dataload:'#e15759',to_device:'#f28e2b',forward:'#4e79a7',backward:'#59a14f',optimizer:'#b07aa1'};
var KIND_COLOR={kernel:'#5b8def',memcpy:'#e6a100',memset:'#999'};
function fmt(v,d){return (v===null||v===undefined)?'n/a':(typeof v==='number'?v.toFixed(d):String(v));}
function has(v){return v!==null&&v!==undefined;}
function fmtu(v,d,u){return has(v)?fmt(v,d)+u:'n/a';}
var H=D.head;
document.getElementById('model').textContent='Training profile: '+(H.model||'(model not named)');
document.getElementById('verdict').textContent='BOUND: '+H.bound;
document.getElementById('why').textContent=H.bound_why+'.'+(H.levers&&H.levers.length?' Levers: '+H.levers.join('; ')+'.':'');
document.getElementById('notes').textContent=(H.notes||[]).join(' | ');
var nums=[['img/s',fmt(H.img_per_s,1)],['step ms',fmt(H.step_ms,2)],['dataload',has(H.dataload_frac)?fmt(100*H.dataload_frac,0)+'%':'n/a'],
 ['GPU util',has(H.gpu_util)?fmt(100*H.gpu_util,0)+'% (raw '+fmt(H.gpu_util_raw,2)+')':'n/a'],
 ['kernels/step',has(H.kernels_per_step)?fmt(H.kernels_per_step,0)+(has(H.mean_kernel_us)?' @ '+fmt(H.mean_kernel_us,1)+' us':''):'n/a'],
 ['Tensor Cores',fmtu(H.tensorcore_pct,0,'%')],
 ['peak VRAM',fmtu(H.peak_vram_mb,0,' MB')],['host overhead',fmtu(H.host_overhead_ms_per_step,2,' ms/step')],
 ['launches/step',fmt(H.launches_per_step,0)]];
var box=document.getElementById('numbers');
nums.forEach(function(n){var d=document.createElement('div');d.textContent=n[0];var b=document.createElement('b');b.textContent=n[1];d.appendChild(b);box.appendChild(d);});
function table(id,caption,head,rows,note){var t=document.createElement('table');t.id=id;var c=document.createElement('caption');
 c.textContent=caption;t.appendChild(c);var tr=document.createElement('tr');head.forEach(function(h){var th=document.createElement('th');
 th.textContent=h;tr.appendChild(th);});t.appendChild(tr);rows.forEach(function(r){var tr=document.createElement('tr');
 r.forEach(function(v){var td=document.createElement('td');if(v&&v.bar!==undefined){var b=document.createElement('span');b.className='bar';
 b.style.width=Math.max(1,Math.round(v.bar))+'px';td.appendChild(b);td.appendChild(document.createTextNode(v.text));}else td.textContent=v;tr.appendChild(td);});
 t.appendChild(tr);});if(note){var tr2=document.createElement('tr');var td=document.createElement('td');td.colSpan=head.length;td.className='muted';
 td.textContent=note;tr2.appendChild(td);t.appendChild(tr2);}document.getElementById('tables').appendChild(t);}
var noTrace=H.trace_collected?'':'no kernel trace in this run (CPU build or tracer off): GPU columns are n/a';
table('phase-table','Per phase (per step)',['phase','wall ms','GPU ms','kernels','ops'],(D.phase_table||[]).map(function(r){
 return [r[0],fmt(r[1],3),fmt(r[2],3),fmt(r[3],1),fmt(r[4],1)];}),noTrace);
var cats=H.trace_collected?(D.categories||[]):[],tops=H.trace_collected?(D.top_kernels||[]):[];
table('kernel-mix','Kernel categories',['category','% of GPU','ms/step'],cats.map(function(r){
 return [r[0],{bar:has(r[1])?r[1]:0,text:fmtu(r[1],1,'%')},fmt(r[2],3)];}),cats.length?'':'no kernels traced');
table('top-kernels','Top kernels',['kernel','% of GPU','ms/step','count'],tops.map(function(r){
 return [r[0].length>70?r[0].slice(0,67)+'...':r[0],fmtu(r[1],1,'%'),fmt(r[2],3),fmt(r[3],1)];}),tops.length?'':'no kernels traced');
var leg=document.getElementById('legend');
Object.keys(PHASE_COLOR).forEach(function(p){var s=document.createElement('span');var i=document.createElement('i');i.style.background=PHASE_COLOR[p];s.appendChild(i);s.appendChild(document.createTextNode(p));leg.appendChild(s);});
var streams=Object.keys(D.lanes).sort(function(a,b){return (+a)-(+b);});
var LABEL=90,ROW=26,TOP=22,W=Math.max(900,(window.innerWidth||1200)-40);
var rows=2+streams.length,HGT=TOP+rows*ROW+10;
var svg=document.getElementById('tl');svg.setAttribute('width',W);svg.setAttribute('height',HGT);
var tEnd=D.steps.length?D.steps[D.steps.length-1][1]:1;
streams.forEach(function(s){D.lanes[s].forEach(function(k){if(k[1]>tEnd)tEnd=k[1];});});
var full=[0,Math.max(tEnd,1e-3)],view=full.slice();
function el(tag,attrs,parent){var e=document.createElementNS(NS,tag);for(var k in attrs)e.setAttribute(k,attrs[k]);parent.appendChild(e);return e;}
function tip(e,text){var t=document.createElementNS(NS,'title');t.textContent=text;e.appendChild(t);}
function x(t){return LABEL+(t-view[0])*(W-LABEL-4)/(view[1]-view[0]);}
// Tick spacing: the smallest 1/2/5 x 10^k step whose labels (about 7 px a character) do not touch.
function ticks(){var span=view[1]-view[0],px=(W-LABEL-4)/span,step=Math.pow(10,Math.floor(Math.log10(span/20)));
 for(var i=0;i<40;i++){var dec=Math.max(0,-Math.floor(Math.log10(step)+1e-9)),w=(Math.max(Math.abs(view[0]),Math.abs(view[1])).toFixed(dec)+' ms').length*7+12;
  if(step*px>=w)return {step:step,dec:dec};var m=Math.round(step/Math.pow(10,Math.floor(Math.log10(step)+1e-9)));step*=(m===2?2.5:2);}
 return {step:span,dec:3};}
function render(){
 while(svg.firstChild)svg.removeChild(svg.firstChild);
 var tk=ticks(),step=tk.step,g=el('g',{},svg);
 for(var t=Math.ceil(view[0]/step)*step;t<=view[1]+step*1e-9;t+=step){if(x(t)<LABEL-1)continue;el('line',{x1:x(t),x2:x(t),y1:TOP-4,y2:HGT,stroke:'#eee'},g);
  var tx=el('text',{x:x(t)+2,y:12,'class':'tick'},g);tx.textContent=t.toFixed(tk.dec)+' ms';}
 var labels=['steps','phases'].concat(streams.map(function(s){return 'stream '+s;}));
 labels.forEach(function(l,i){var tx=el('text',{x:4,y:TOP+i*ROW+16,'class':'lane-label'},svg);tx.textContent=l;});
 var body=el('svg',{x:LABEL,y:0,width:W-LABEL,height:HGT,viewBox:LABEL+' 0 '+(W-LABEL)+' '+HGT},svg);
 D.steps.forEach(function(s,i){var r=el('rect',{'class':'step','data-step':i,x:x(s[0]),y:TOP+2,width:Math.max(1,x(s[1])-x(s[0])-1),height:ROW-6,
  fill:s[2]?'#9aa9bd':'#c9d6e8',stroke:'#6b7b91'},body);tip(r,'step '+i+(s[2]?' (synced)':' (unsynced)')+': '+(s[1]-s[0]).toFixed(3)+' ms');});
 D.phases.forEach(function(p){var r=el('rect',{'class':'phase','data-phase':p[1],'data-step':p[0],x:x(p[2]),y:TOP+ROW+2,
  width:Math.max(1,x(p[3])-x(p[2])),height:ROW-6,fill:PHASE_COLOR[p[1]]||'#777'},body);tip(r,p[1]+' (step '+p[0]+'): '+(p[3]-p[2]).toFixed(3)+' ms');});
 streams.forEach(function(s,li){var y=TOP+(2+li)*ROW+2,run=null;
  function flush(){if(!run)return;var r=el('rect',{'class':'kernel',x:run.a,y:y,width:Math.max(0.5,run.b-run.a),height:ROW-6,fill:KIND_COLOR[run.kind]},body);
   tip(r,run.n===1?D.names[run.name]+' ('+run.ms.toFixed(4)+' ms)':run.n+' activities, '+run.ms.toFixed(3)+' ms');run=null;}
  D.lanes[s].forEach(function(k){if(k[1]<view[0]||k[0]>view[1])return;var a=x(k[0]),b=x(k[1]);
   if(run&&a-run.b<0.5&&run.kind===k[3]){run.b=Math.max(run.b,b);run.n++;run.ms+=k[1]-k[0];return;}
   flush();run={a:a,b:b,n:1,name:k[2],kind:k[3],ms:k[1]-k[0]};});flush();});
}
render();
var drag=null;
svg.addEventListener('wheel',function(e){e.preventDefault();var r=svg.getBoundingClientRect(),px=e.clientX-r.left;
 var t=view[0]+(px-LABEL)*(view[1]-view[0])/(W-LABEL-4),f=e.deltaY<0?0.8:1.25;
 view=[t-(t-view[0])*f,t+(view[1]-t)*f];render();},{passive:false});
svg.addEventListener('mousedown',function(e){drag={x:e.clientX,v:view.slice()};svg.style.cursor='grabbing';});
window.addEventListener('mouseup',function(){drag=null;svg.style.cursor='grab';});
window.addEventListener('mousemove',function(e){if(!drag)return;var dt=(e.clientX-drag.x)*(drag.v[1]-drag.v[0])/(W-LABEL-4);
 view=[drag.v[0]-dt,drag.v[1]-dt];render();});
svg.addEventListener('dblclick',function(){view=full.slice();render();});
var ok=document.createElement('div');ok.id='render-ok';ok.style.display='none';document.body.appendChild(ok);
})();
)JS";
}  // namespace detail

LIBREYOLO_INLINE std::string timeline_html(const WindowRecord& rec, const nlohmann::json& profile);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/timeline_html-inl.hpp>
#endif
